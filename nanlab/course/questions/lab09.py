"""Lab 09 (09_data_parallel): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion, OrderingQuestion
from nanlab.course.rubric import KeyPoint, WrongClaim

LAB = "09_data_parallel"

QUESTIONS = [
    MultipleChoiceQuestion(
        "09-which-ranks",
        "An 8-GPU DDP job, no guard. One sample on rank 5 has a NaN feature. After that "
        "step's optimizer update, which ranks have NaN weights?",
        ["all 8, bit-identical to each other", "only rank 5",
         "rank 5, and the ranks it talks to in the ring", "none: DDP drops non-finite "
         "gradients"],
        answers=0,
        explanation="DDP all-reduces (averages) the gradients: one NaN term makes the "
        "average NaN on every rank, and every rank applies the same NaN update. The "
        "replicas stay identical, identically destroyed; no error is raised.",
        hints=["What does an average with one NaN term give?"],
        why=["Section 1: the average with one NaN term is NaN on every rank, and every rank "
             "applies the same update: identically destroyed, bit for bit.",
             "Section 1: rank 0's own loss was finite at the bad step, yet its weights "
             "ended NaN: the all-reduce brought the other rank's NaN to it.",
             "The all-reduce hands every rank the same averaged gradient, whatever the "
             "ring's layout: no rank is spared (section 1).",
             "Plain DDP checks nothing (section 4's table: it trains on, NaN everywhere); "
             "Megatron-LM and DeepSpeed add a found-inf flag for that."],
    ),
    MultipleChoiceQuestion(
        "09-local-loss-check",
        "Your DDP loop does: backward; then `if math.isfinite(loss.item()): "
        "optimizer.step()`. Rank 1's batch has a NaN in its input; rank 0's is clean. "
        "What happens at that step?",
        ["rank 1 skips; rank 0's loss is finite, so it steps with the NaN-averaged "
         "gradients: rank 0's weights become NaN, rank 1's stay finite",
         "both ranks skip: the loss is averaged by DDP like the gradients",
         "both ranks step and both become NaN",
         "rank 1 skips, rank 0 steps with its own clean gradients: a small drift"],
        answers=0,
        explanation="The loss is local (section 1: rank 0's loss was finite at the bad "
        "step) but the gradients are averaged, so rank 0's gradients are NaN. A check "
        "on the local loss lets rank 0 write NaN into its weights while rank 1 skips: "
        "one rank destroyed, the replicas different. Check the global grad norm, and "
        "all-reduce the flag.",
        hints=["Which one does DDP average: the loss, or the gradients?",
               "What did rank 0's loss show at step 6 in the nan run?"],
        why=["Section 1: the loss is local (rank 0's was finite at the bad step) but the "
             "gradients are averaged, so rank 0 steps with NaN gradients while rank 1 "
             "skips.",
             "DDP averages gradients, never the loss: each rank's loss comes from its own "
             "shard (section 1).",
             "Rank 1's own loss is NaN, so its check holds its step back; only a rank whose "
             "loss is finite steps.",
             "After DDP's all-reduce no rank holds clean gradients: rank 0's already carry "
             "rank 1's NaN (section 1)."],
    ),
    OrderingQuestion(
        "09-guarded-step",
        "Put one guarded data-parallel training step in order.",
        ["forward and backward; DDP all-reduces the gradients",
         "each rank computes its flags (loss or grad norm non-finite, loss spike)",
         "all-reduce the flags with MAX",
         "every rank applies the same decision: step, or skip the optimizer and LR step",
         "log the decision and its reason on every rank"],
        explanation="The flags can only be computed once the loss and the reduced "
        "gradients exist; they must be agreed before anyone touches the weights; the "
        "decision is logged so that a skipped step is never silent.",
        hints=["Which step must come before any rank touches the weights?"],
    ),
    FreeTextQuestion(
        "09-dp-skip",
        "Interview: 'We skip the optimizer step when the loss is NaN or spikes. We are "
        "moving to 64-GPU data parallelism. What can go wrong, and what do you change?' "
        "Three or four sentences.",
        key_points=[
            KeyPoint("a local decision makes ranks disagree",
                     ("loss is local", "local loss", "local to each rank", "local value",
                      "local decision", "decide locally", "decides locally", "decided locally",
                      "decision on a local", "own shard", "its own loss", "own local loss",
                      "each rank's own", "per-rank loss", "one rank skips", "only that rank",
                      "that rank only", "only one rank", "only the affected rank",
                      "some ranks skip", "some ranks step", "others step", "others still step",
                      "other ranks step", "while the others", "ranks disagree", "disagree on",
                      "different decision", "different decisions", "not all ranks",
                      "ranks make different", "本地算的", "本地的loss", "本地loss", "各自的loss",
                      "自己的loss", "只看自己的", "有的rank跳过", "有的rank更新", "有的跳过",
                      "各自决定", "单个rank", "只有一个rank", "决定不一致", "loss不一样",
                      "自己跳过", "其他rank照常", "照常更新"),
                     "say what is different about the loss on one rank"),
            KeyPoint("the replicas drift apart silently",
                     ("drift apart", "drifts apart", "replicas drift", "replicas diverge",
                      "weights diverge", "models diverge", "out of sync", "ranks desync",
                      "replicas desync", "can desynchronize", "ranks desynchronize",
                      "replicas desynchronize", "different weights", "different models",
                      "replicas differ", "not identical", "no longer identical", "never re-syncs",
                      "never resyncs", "only syncs gradients", "only averages gradients",
                      "only synchronises gradients", "only synchronizes gradients",
                      "syncs gradients, not", "not the parameters", "never the parameters",
                      "副本不一致", "参数不一致", "权重不一致", "模型不一致", "不一致了",
                      "悄悄不一致", "漂移", "只同步梯度", "不同步参数", "参数不同步", "权重不同步",
                      "不同步了"),
                     "say what happens to the replicas"),
            KeyPoint("all-reduce the flag with MAX, so every rank skips",
                     ("all-reduce the skip", "all-reduce the flag", "allreduce the flag",
                      "all reduce the flag", "all-reduce a flag", "all-reduce the decision",
                      "all-reduce the skip flag", "all-reduce the skip flags", "all-reduces the",
                      "with max", "a max all-reduce", "max all-reduce", "max-reduce", "logical or",
                      "if any rank", "any rank wants", "every rank skips", "all ranks skip",
                      "all skip", "skip together", "everyone skips", "same decision",
                      "global decision", "decision global", "agree on", "做all-reduce",
                      "flag做all-reduce", "all-reduce(max", "所有rank一起跳", "一起跳", "都跳过",
                      "所有rank都跳", "任何一个rank", "统一决定", "一致的决定"),
                     "name the collective that makes the decision global"),
            KeyPoint("check the gradient norm, not only the local loss",
                     ("global grad norm", "global gradient norm", "grad norm after",
                      "norm after the all-reduce", "averaged gradient", "averaged gradients",
                      "global norm", "global的grad norm", "平均梯度"),
                     "say which value sees another rank's NaN", bonus=True),
            KeyPoint("verify and log",
                     ("checksum", "hash", "compare the weights", "bit-identical", "log", "count",
                      "日志"),
                     "say how you would know it worked", bonus=True),
        ],
        must_not=[
            WrongClaim("each rank can decide on its own",
                       ("keeps deciding on its own", "keep deciding on its own",
                        "can decide on its own", "let each rank decide", "nothing changes",
                        "nothing really changes", "自己判断就行", "自己决定跳不跳就行",
                        "自己决定就行", "各自决定就行"),
                       "the loss is local: a rank that skips alone leaves the replicas "
                       "different, silently",
                       "Nothing changes: each rank keeps deciding on its own loss."),
            WrongClaim("DDP re-syncs the parameters every step",
                       ("broadcasts the parameters every step", "broadcast the parameters every",
                        "broadcasts parameters every", "syncs the parameters every",
                        "re-syncs the parameters", "resyncs the parameters", "把rank 0的参数广播",
                        "参数广播出去", "每一步都会广播", "keeps all replicas in sync",
                        "keeps the replicas in sync", "自动同步参数"),
                       "DDP broadcasts the parameters once, at the start, and then only "
                       "averages gradients: replicas that step differently stay different",
                       "DDP broadcasts the parameters every step, so they can't diverge."),
            WrongClaim("all-reduce the flag with MIN (skip only if every rank is bad)",
                       ("with min", "min all-reduce", "min-reduce", "only when every rank",
                        "only if every rank", "only if all ranks", "only when all ranks",
                        "logical and", "用min", "所有rank都nan才"),
                       "with MIN one bad rank steps alone and the replicas drift; MAX (any "
                       "rank bad, every rank skips) keeps them identical",
                       "All-reduce the skip flag with MIN, so the step is skipped only when "
                       "every rank sees a NaN."),
        ],
        model_answer="The loss is computed on each rank's own shard, so a NaN or a spike "
        "in one shard trips the check on that rank only: it skips while the others step, "
        "and from then on the replicas hold different weights, silently, because DDP "
        "only syncs gradients. I would all-reduce the skip flag with MAX before the "
        "optimizer step so that any bad rank makes every rank skip, as Megatron-LM and "
        "DeepSpeed do for their found-inf flag, and also check the global gradient norm, "
        "which sees another rank's NaN after the all-reduce. Every skip is logged with "
        "its reason, and a periodic checksum of the weights across ranks proves they "
        "are still bit-identical.",
        hints=["Is the loss averaged across ranks, like the gradients?",
               "What one collective would make all ranks take the same decision?"],
        good_answers=[
            "The loss is local to each rank, so a NaN or spike check on the local loss makes "
            "only the affected rank skip while the others step, and DDP only averages "
            "gradients, never re-syncs parameters, so the replicas silently drift apart. Also "
            "a NaN on one rank becomes NaN in everyone's averaged gradient, so a rank whose "
            "own loss is finite would step with NaN gradients. I'd check the global grad norm "
            "after the all-reduce as well, and all-reduce the skip flags with MAX before the "
            "optimizer step so if any rank wants to skip, all skip (same for rollbacks). "
            "Cheap: two numbers per step.",
            "loss 是每个 rank 本地算的，如果每个 rank 只看自己的 loss 决定跳不跳，就会有的 "
            "rank 跳过、有的 rank 更新，DDP 只同步梯度不同步参数，"
            "副本就悄悄不一致了；而且一个 rank 的 NaN 经过 all-reduce 会让所有 rank "
            "的平均梯度都变 NaN，本地 loss 正常的 rank 会拿 NaN 梯度去更新。要改成：检查 "
            "all-reduce 之后的 global grad norm，并在 optimizer.step 之前把 skip flag 做 "
            "all-reduce（MAX），任何一个 rank 要跳，所有 rank 一起跳。",
            "Local decisions desync replicas and let finite-loss ranks step with NaN averaged "
            "gradients. Check the global grad norm and all-reduce the skip flags (MAX) so all "
            "ranks skip together.",
        ],
        wrong_answers=[
            "Nothing changes: each rank keeps deciding on its own loss, and DDP broadcasts "
            "the parameters every step, so they can't diverge.",
            "每个 rank 自己决定跳不跳就行，DDP 每一步都会把 rank 0 的参数广播出去，"
            "所以不会不一致。",
            "All-reduce the skip flag with MIN, so the step is skipped only when every rank "
            "sees a NaN; otherwise one bad shard stalls 64 GPUs.",
        ],
    ),
]
