"""Lab 09 (09_data_parallel): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import FreeTextQuestion, MultipleChoiceQuestion, OrderingQuestion
from nanlab.course.rubric import KeyPoint

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
                     ("local", "one rank", "only that rank", "that rank only",
                      "own shard", "some ranks", "disagree", "different decision",
                      "单个", "本地"),
                     "say what is different about the loss on one rank"),
            KeyPoint("the replicas drift apart silently",
                     ("drift", "diverge", "out of sync", "desync", "different weights",
                      "replicas differ", "not identical", "不一致", "漂移"),
                     "say what happens to the replicas"),
            KeyPoint("all-reduce the flag with MAX, so every rank skips",
                     ("all-reduce", "all reduce", "allreduce", "max", "every rank skips",
                      "all ranks skip", "全归约"),
                     "name the collective that makes the decision global"),
            KeyPoint("check the gradient norm, not only the local loss",
                     ("grad norm", "gradient norm", "global norm", "gradients", "梯度"),
                     "say which value sees another rank's NaN"),
            KeyPoint("verify and log",
                     ("checksum", "hash", "compare the weights", "bit-identical", "log",
                      "count", "日志"),
                     "say how you would know it worked"),
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
    ),
]
