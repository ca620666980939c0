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
        why=["Section 1: 5 exponent bits and 10 mantissa bits give (2 - 2**-10) * 2**15, "
             "the number torch.finfo(torch.float16).max prints.",
             "That is 2**16, one step past the largest exponent with every mantissa bit "
             "set: in fp16 it becomes inf (section 2).",
             "That is float32's (and bfloat16's) maximum, with 8 exponent bits; fp16 has 5 "
             "(section 1).",
             "That is the largest 16-bit signed integer (int16), not a float16 value."],
    ),
    MultipleChoiceQuestion(
        "01-which-nan",
        "Which of these give NaN? (pick all)",
        ["inf - inf", "0 * inf", "1 / 0", "0 / 0", "log(0)", "sqrt(-1)"],
        answers=[0, 1, 3, 5],
        explanation="NaN appears when there is no meaningful answer; 1/0 and log(0) "
        "have one: an infinity.",
        hints=["Two of the six give an infinity, not NaN."],
        why=["Section 4: two infinities that cancel have no meaningful value.",
             "Section 4: a zero meeting an infinity has no meaningful value.",
             "Section 4: a non-zero number over zero is an infinity with that number's "
             "sign: +inf, a number with rules.",
             "Section 4: zero over zero has no meaningful value, NaN directly.",
             "Section 4: the log of zero is minus infinity, a number with rules.",
             "Section 4: no real number squares to -1."],
    ),
    MultipleChoiceQuestion(
        "01-predict-square",
        "Predict the output of `torch.tensor(300.).half() ** 2`.",
        ["tensor(90000., dtype=torch.float16)", "tensor(inf, dtype=torch.float16)",
         "tensor(nan, dtype=torch.float16)", "OverflowError"],
        answers=1,
        explanation="90000 > 65504, so the result rounds to inf, without any error.",
        hints=["Compare 90000 with torch.finfo(torch.float16).max."],
        why=["90000 is above fp16's largest value, 65504, so fp16 cannot hold it; "
             "section 2 prints what comes instead.",
             "Section 2: 90000 > 65504 rounds to inf, with no error and no warning.",
             "Overflow alone is not NaN: NaN needs an infinity to meet another one or a "
             "zero (section 4).",
             "Float overflow raises nothing in PyTorch: section 2 runs exactly this line "
             "and prints a tensor."],
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
        why=["Sections 1 and 3: range comes from the exponent; bf16 reaches fp32's 3.4e38 "
             "and keeps a gradient of 1e-9 that fp16 flushes to 0.",
             "Section 1: it has fewer, 7 against fp16's 10: bf16 buys range with "
             "precision, and 1.001 rounds to 1 in it.",
             "Section 2: a bf16 square is rounded in bf16 (300 squared gives 90112): the "
             "values really are bf16.",
             "No format clips anything: clipping is a call in the training loop (Lab 03, "
             "section 4), the same in every precision."],
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
