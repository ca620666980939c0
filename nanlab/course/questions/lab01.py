"""Lab 01 (01_numbers): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion

LAB = "01_numbers"

QUESTIONS = [
    MultipleChoiceQuestion(
        "01-fp16-max",
        "What is the largest finite float16 value?",
        ["65504", "65536", "3.4e38", "32767"],
        answers=0,
        explanation="(2 - 2**-10) * 2**15 = 65504: 10 mantissa bits, largest exponent 15.",
        hints=["A format's largest finite value has the largest exponent and every mantissa "
               "bit set: a little under the next power of two.",
               "65536 is two to the 16th: one step too far for fp16.",
               "torch.finfo(torch.float16).max"],
    ),
    MultipleChoiceQuestion(
        "01-which-nan",
        "Which of these give NaN? (pick all)",
        ["inf - inf", "0 * inf", "1 / 0", "0 / 0", "log(0)", "sqrt(-1)"],
        answers=[0, 1, 3, 5],
        explanation="NaN appears when there is no meaningful answer; 1/0 and log(0) "
        "have one: an infinity.",
        hints=["Two of the six give an infinity, not NaN."],
    ),
    MultipleChoiceQuestion(
        "01-predict-square",
        "Predict the output of `torch.tensor(300.).half() ** 2`.",
        ["tensor(90000., dtype=torch.float16)", "tensor(inf, dtype=torch.float16)",
         "tensor(nan, dtype=torch.float16)", "OverflowError"],
        answers=1,
        explanation="90000 > 65504, so the result rounds to inf, without any error.",
        hints=["Compare 90000 with torch.finfo(torch.float16).max."],
    ),
    MultipleChoiceQuestion(
        "01-bf16-why",
        "Why does bfloat16 training usually work without a loss scaler?",
        ["It has 8 exponent bits: the same range as float32",
         "It has more mantissa bits than float16",
         "PyTorch computes bfloat16 in float32 behind the scenes",
         "Its gradients are clipped automatically"],
        answers=0,
        explanation="Range comes from the exponent; bfloat16 trades precision (7 mantissa "
        "bits) for float32's range, so small gradients do not underflow.",
        hints=["Which part of a float sets its range?"],
    ),
    FreeTextQuestion(
        "01-nan-vs-oom",
        "In two sentences: why is a NaN loss more dangerous than an out-of-memory error?",
        key_points=[
            ("silent: no error is raised", ("no error", "no exception", "silent",
                                            "without error", "does not crash",
                                            "doesn't crash", "keeps running",
                                            "keeps training", "不报错", "静默")),
            ("it spreads to the weights", ("weight", "parameter", "spread", "propagate",
                                           "contaminate", "poison", "权重")),
            ("found late: compute wasted", ("waste", "hours", "days", "late",
                                            "unnoticed", "notice", "compute", "浪费")),
        ],
        model_answer="An OOM raises an error at once, but a NaN raises nothing: training "
        "keeps running while the NaN spreads into every weight, so the run is wasted "
        "and you may notice only hours later.",
        hints=["What happens in the program when each one occurs?",
               "Where did the NaN end up after one optimizer step in section 6?"],
    ),
]
