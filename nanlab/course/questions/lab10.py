"""Lab 10 (10_interview): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import MultipleChoiceQuestion

LAB = "10_interview"

QUESTIONS = [
    MultipleChoiceQuestion(
        "10-level-mistake",
        "An experienced-hire candidate (社招) answers: 'We had NaNs once; I lowered the "
        "learning rate and it worked.' What is the main problem with this answer?",
        ["No numbers and no evidence: which step, which model, what proved the cause, "
         "what the loss was afterwards",
         "Lowering the learning rate never fixes a NaN",
         "It should have started with the definition of NaN in IEEE 754",
         "Nothing: a short answer is best"],
        answers=0,
        explanation="The experienced level is judged on one real case told with its "
        "numbers and evidence. 'Lowered the LR and it worked' is a workaround with no "
        "root cause, and no way to tell whether it even was the cause.",
        hints=["What does the framework table say is the typical mistake of that level?"],
        why=["Section 2's table: the experienced level is judged on one real case with its "
             "numbers; 'no numbers' is that level's typical mistake.",
             "It often does: Lab 03's high_lr run was cured by LR / 10. What is missing is "
             "the evidence that the LR was the cause.",
             "Principles are the new graduate's ground; an experienced answer starts from "
             "the case it debugged (section 2).",
             "Section 2 quotes this very answer as the typical mistake of the level: it "
             "says nothing about evidence or effect."],
    ),
]
