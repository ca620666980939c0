"""Lab 08 (08_guard_recovery): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import (
    FreeTextQuestion,
    MultipleChoiceQuestion,
    OrderingQuestion,
    RootCauseQuestion,
)
from nanlab.course.rubric import KeyPoint

LAB = "08_guard_recovery"

QUESTIONS = [
    MultipleChoiceQuestion(
        "08-where-to-check",
        "Your stop-loss checks the loss in a callback that runs after optimizer.step(). "
        "It sees a NaN at step 30 and stops the run. What is in the model's weights now?",
        ["NaN, in every weight: update 30 already applied the NaN gradients",
         "the weights from before step 30, because the run stopped",
         "NaN only in the layers next to the bad input",
         "the last checkpoint's weights"],
        answers=0,
        explanation="The check came one event too late (section 3): the update was "
        "applied. Check after backward and before optimizer.step(), where the update can "
        "still be dropped and the state before the failure kept.",
        hints=["Which runs first: the optimizer step or your callback?",
               "Section 2: how many parameters are NaN after one NaN update?"],
        why=["Section 3: the check in on_step_end came after the update, and every "
             "parameter was already non-finite; one NaN update poisons every weight "
             "(section 2).",
             "Stopping after the update does not undo it: section 3's late check stopped "
             "after step 30 with no finite parameter left.",
             "Section 2: one NaN update made every parameter NaN, since every weight is "
             "downstream of the loss.",
             "A stop reloads nothing: the live weights are the ones the update wrote, and "
             "the last checkpoint is up to 10 steps old."],
    ),
    OrderingQuestion(
        "08-recovery-order",
        "Put the automatic recovery of a non-finite step in order.",
        ["drop the update of the bad step",
         "save the bad state, its batch and its gradients as evidence",
         "reload the last good checkpoint (weights, optimizer, schedule, RNG)",
         "mark the batches around the bad one never to be trained on",
         "resume; if the failure comes back, go back further and cut the LR by 10",
         "after max_rollbacks, stop the run with a reason"],
        explanation="Drop the update first so the state is still good; keep it as "
        "evidence before the reload overwrites it; then restore, skip the data and "
        "resume. The LR is cut only when the failure repeats, and a bound on retries "
        "stops a loop.",
        hints=["What would the reload destroy if you did it before saving the evidence?",
               "The LR cut is for the case where skipping data did not help."],
    ),
    RootCauseQuestion(
        "08-comes-back",
        "Mystery: a run goes NaN at step 26. The guard rolls back to step 20 and skips "
        "batches 25 to 28; the NaN comes back at step 26, on a different batch. What is "
        "the root cause? Tick the evidence that supports it.",
        ["dirty data", "learning rate too high", "a flaky GPU (bit flip)", "bad init"],
        answer="learning rate too high",
        evidence=["the NaN came back on a different batch",
                  "the NaN came back at the same step",
                  "after going back to step 10 with LR / 10 the run finished finite",
                  "the guard kept the bad state as evidence",
                  "the loss at step 0 was about ln(vocab_size)"],
        supporting=["the NaN came back on a different batch",
                    "the NaN came back at the same step",
                    "after going back to step 10 with LR / 10 the run finished finite"],
        explanation="A data fault moves with its batch; a fault that returns at the same "
        "step on other data lives in the training dynamics, and LR / 10 curing it names "
        "the LR. A bit flip would not reproduce at all (Guard(rerun=True) would call it "
        "transient). Keeping evidence and the initial loss say nothing about the cause.",
        hints=["Does a dirty-data NaN follow the batch or the step?",
               "Which single change made the run finish?"],
        why=["Section 5: a data fault moves with its batch; one that returns on other data "
             "lives in the training dynamics.",
             "Section 5: a fault in the training dynamics returns at about the same step, "
             "whatever the batches.",
             "Section 5: the guard's second rollback cut the LR tenfold and the run "
             "finished: one change, and it cured.",
             "The guard keeps evidence on every failure, whatever its cause (section 3).",
             "A healthy start: it clears the init and points at nothing."],
        family_why=["Skipping batches 25 to 28 did not help, and the NaN came back on other "
                    "data: a data fault would have gone with its batch.",
                    "Section 5: high_lr came back at the same step after a rollback, and "
                    "going further back with the LR cut finished the run.",
                    "A flipped bit does not come back in a replay (Lab 14, section 5; "
                    "Guard(rerun=True) calls it transient); this NaN did.",
                    "The run trained for 26 steps from a healthy first loss; a bad init "
                    "fails from the start."],
    ),
    FreeTextQuestion(
        "08-interview-recovery",
        "Interview: 'On day 5 of a two-week pretraining run the loss went NaN. What should "
        "the training system have done automatically, and how do you check the recovery "
        "worked?' Answer in three to five sentences.",
        key_points=[
            KeyPoint("detect at once and stop training on NaN",
                     ("stop", "stop-loss", "detect", "isfinite", "isnan", "check the loss",
                      "non-finite", "drop that update", "drop the update", "止损", "检测"),
                     "say what happens at the first non-finite step"),
            KeyPoint("keep the evidence: bad state, batch, gradients",
                     ("evidence", "snapshot", "save the state", "the batch", "gradients",
                      "log", "证据", "快照", "保存"),
                     "say what is kept for the post-mortem"),
            KeyPoint("roll back to the last good checkpoint",
                     ("checkpoint", "roll back", "rollback", "restore", "reload", "回滚",
                      "检查点"),
                     "say where training resumes from"),
            KeyPoint("skip the offending batches; cut the LR if it comes back",
                     ("skip", "batches", "lower the lr", "lr / 10", "lr/10",
                      "learning rate", "跳过", "学习率"),
                     "say what changes when it resumes"),
            KeyPoint("compare with a clean run at the same step, same seed",
                     ("same step", "same seed", "clean run", "baseline", "before the failure",
                      "相同种子", "同一步"),
                     "say how you prove the recovery"),
        ],
        model_answer="A guard after backward and before the optimizer step should see the "
        "non-finite loss at once and drop that update, so the weights stay clean. It saves "
        "the bad state, the batch and the gradients as evidence, reloads the last good "
        "checkpoint with the optimizer state, and marks the offending batches to be "
        "skipped; if the NaN comes back at the same point, it goes back further and cuts "
        "the learning rate by 10, with a bound on retries. To check the recovery I compare "
        "the loss at the same steps with the run before the failure or a clean run with "
        "the same seed, averaged over a few steps, rather than a fixed threshold.",
        hints=["What must happen before the optimizer step writes NaN into the weights?",
               "Where does training resume from, and what does it avoid the second time?",
               "Against what do you compare the loss after the restart?"],
    ),
]
