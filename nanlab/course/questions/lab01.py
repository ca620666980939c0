"""Lab 01 (01_numbers): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion
from nanlab.course.rubric import KeyPoint, WrongClaim

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
            KeyPoint("silent: no error is raised",
                     ("no error", "no exception", "no warning", "nan is silent", "is silent",
                      "silently keeps", "silently continues", "fails silently", "silent failure",
                      "raises nothing", "raise nothing", "throws nothing", "without error",
                      "without an error", "without any error", "without crashing", "does not crash",
                      "doesn't crash", "never crashes", "does not stop", "doesn't stop",
                      "keeps running", "keep running", "keeps training", "keep training",
                      "carries on", "goes on training", "runs to the end", "nothing complains",
                      "nobody notices", "nothing tells you", "doesn't throw", "does not throw",
                      "throws no", "loop continues", "training continues", "job continues",
                      "run continues", "happily continues", "keeps going", "keep going", "不报错",
                      "不会报错", "没有报错", "没有任何报错", "没有异常", "不抛异常", "不会抛异常",
                      "静默", "悄无声息", "悄悄", "继续跑", "继续训练", "照常进行", "照常训练",
                      "接着跑", "照样跑", "不会停", "不会崩"),
                     "say what happens in the program when each one occurs"),
            KeyPoint("it spreads to the weights",
                     ("every weight", "all the weights", "all weights", "all parameters",
                      "every parameter", "into the weights", "the weights become nan",
                      "weights turn nan", "weights are nan", "poisons the weights",
                      "corrupts the weights", "corrupts the model", "destroys the model",
                      "ruins the model", "spreads to", "spreads into", "spreads through",
                      "propagates to", "propagates into", "propagates through", "contaminates the",
                      "contaminates every", "weights are destroyed", "weights are ruined",
                      "weights are corrupted", "destroys the weights", "ruins the weights",
                      "training on garbage", "trains on garbage", "on garbage", "garbage weights",
                      "model is garbage", "cannot recover", "can't recover", "never recovers",
                      "is irreversible", "irreversible damage", "所有参数", "所有权重", "全部参数",
                      "全部权重", "参数都是nan", "权重都是nan", "全变成nan", "都变成nan", "都变nan",
                      "全是nan", "全成了nan", "都成了nan", "全部变成nan", "权重变成nan",
                      "参数变成nan", "传染", "扩散到", "污染", "毁掉", "废了", "恢复不了",
                      "无法恢复"),
                     "say where the NaN ends up after one optimizer step"),
            KeyPoint("found late: compute wasted",
                     ("waste compute", "wastes compute", "wasted compute", "wasting compute",
                      "compute is wasted", "wasted gpu", "waste gpu", "burns compute",
                      "burning compute", "gpu hours", "gpu time", "gpu days", "days of gpu",
                      "burn days", "burn gpu", "卡时", "浪费了", "hours later", "days later",
                      "notice late", "noticed late", "find out late", "found late",
                      "goes unnoticed", "go unnoticed", "unnoticed for", "only notice",
                      "may notice only", "without noticing", "slips past",
                      "every comparison with nan is false", "comparisons with nan are false",
                      "comparison is false", "fails every comparison", "your own check",
                      "a check you write", "explicit isfinite", "isfinite check", "check isfinite",
                      "torch.isfinite", "浪费算力", "浪费计算", "浪费gpu", "浪费时间", "白跑",
                      "白白浪费", "很晚才发现", "发现不了", "难以发现", "不容易发现", "发现得晚",
                      "几天后", "几小时后", "自己加的", "isfinite检查", "比较都是false",
                      "比较都为false"),
                     "say what it costs before anyone notices"),
        ],
        must_not=[
            WrongClaim("PyTorch stops the run on a NaN",
                       ("pytorch stops the run", "stops the run on nan", "nan stops the run",
                        "nan crashes the run", "nan raises an error", "nan raises an exception",
                        "nan会报错", "nan会直接停", "nan会崩"),
                       "a NaN raises nothing: the loop runs on, every weight NaN",
                       "NaN is dangerous because PyTorch stops the run on a NaN loss."),
            WrongClaim("a NaN recovers by itself or is harmless",
                       ("recover by itself", "recovers by itself", "recovers on its own",
                        "averages out", "自己恢复", "只是某一步"),
                       "one step with NaN gradients writes NaN into every weight; nothing "
                       "brings the run back",
                       "A NaN is one bad step; the run recovers by itself afterwards."),
            WrongClaim("an OOM is the more dangerous one",
                       ("oom is more dangerous", "oom更危险", "oom 更危险", "oom is worse",
                        "oom keeps the process alive", "oom is silent", "oom fails silently",
                        "oom不报错", "nan makes the gpu run out of memory",
                        "run out of memory faster"),
                       "an OOM stops the run loudly at once; a NaN trains on silently",
                       "OOM is worse, because the process dies and you lose progress."),
        ],
        model_answer="An OOM raises an error at once, but a NaN raises nothing: training "
        "keeps running while the NaN spreads into every weight, so the run is wasted "
        "and you may notice only hours later.",
        hints=["What happens in the program when each one occurs?",
               "Where did the NaN end up after one optimizer step in section 6?"],
        good_answers=[
            "An OOM raises an exception and kills the job, so you find out at once. A NaN "
            "raises nothing: training keeps running, every weight turns NaN after one update, "
            "and compute is wasted until an explicit isfinite check catches it.",
            "OOM 会抛异常、直接停掉，马上就知道；NaN 不报错，训练继续跑，一步之后所有参数都是 "
            "NaN，白白浪费算力，只能靠自己加的 isfinite 检查发现。",
            "OOM is loud and stops the run; NaN is silent, keeps training on garbage and even "
            "slips past `loss > threshold` checks, since every comparison with NaN is False.",
        ],
        wrong_answers=[
            "NaN is more dangerous because it makes the GPU run out of memory faster. OOM at "
            "least tells you how much memory you need.",
            "其实 OOM 更危险，直接挂掉进度全没了；NaN 只是某一步的 loss 不对，后面会自己恢复。",
            "NaN is dangerous because PyTorch stops the run and you lose the optimizer state; "
            "OOM keeps the process alive.",
        ],
    ),
]
