"""Lab 08 (08_guard_recovery): its practice questions with their keys, shown by id in the lab."""

from nanlab.course.quiz import (
    FreeTextQuestion,
    MultipleChoiceQuestion,
    OrderingQuestion,
    RootCauseQuestion,
)
from nanlab.course.rubric import KeyPoint, WrongClaim

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
                     ("before the optimizer step", "before optimizer.step", "before the update",
                      "before the step", "after backward", "between backward", "drop that update",
                      "drop the update", "dropped that update", "dropped the update",
                      "drop the bad update", "skip the bad update", "skip that update",
                      "skip the update", "skipped the update", "discard the update",
                      "discard that update", "throw away the update", "skip the step",
                      "skip that step", "skip the optimizer step", "detect the nan",
                      "detect it at once", "detected at once", "detect non-finite",
                      "detect the non-finite", "check isfinite", "isfinite check", "torch.isfinite",
                      "stop at the first nan", "stop the run", "stop training", "halt the run",
                      "stop-loss", "weights stay clean", "在optimizer.step之前",
                      "optimizer.step之前", "更新之前", "step之前", "检测到nan", "发现nan",
                      "丢掉这次更新", "丢弃这次更新", "跳过这次更新", "跳过这一步", "止损",
                      "停止训练", "停掉"),
                     "say what happens at the first non-finite step"),
            KeyPoint("roll back to the last good checkpoint",
                     ("roll back", "rolls back", "rolled back", "rolling back", "a rollback",
                      "automatic rollback", "rollback to", "last good checkpoint",
                      "last checkpoint", "latest good checkpoint", "validated checkpoint",
                      "verified checkpoint", "healthy checkpoint", "clean checkpoint",
                      "finite checkpoint", "checkpoint whose weights", "checkpoint before the nan",
                      "checkpoint before the failure", "reload the last", "reloads the last",
                      "restore the last", "restores the last", "resume from the last",
                      "restart from the last", "go back to the last", "go back one checkpoint",
                      "回滚到", "自动回滚", "回滚至", "回退到", "退回到", "验证过的checkpoint",
                      "正常的checkpoint", "好的checkpoint", "干净的checkpoint", "上一个checkpoint",
                      "最近一个正常"),
                     "say where training resumes from"),
            KeyPoint("skip the offending batches; cut the LR if it comes back",
                     ("skip the batches", "skip the offending", "skip the bad batch",
                      "skip those batches", "skip that batch", "skip the data",
                      "skip the offending data", "skip that data", "skip the bad data",
                      "skipped the batches", "skips the batches", "batches around the failure",
                      "batches to be skipped", "mark the batches", "marks the offending",
                      "offending batches", "never retrain the", "avoid the bad batch", "cut the lr",
                      "cuts the lr", "lower the lr", "lowers the lr", "reduce the lr",
                      "lower the learning rate", "cut the learning rate",
                      "reduce the learning rate", "lr by 10", "lr / 10", "lr/10", "lr ÷ 10",
                      "learning rate by 10", "lr by ten", "if it recurs", "if it comes back",
                      "if it fails again", "if the nan comes back", "fails again at the same",
                      "跳过出问题", "跳过这些batch", "跳过坏batch", "跳过那个batch",
                      "跳过附近的batch", "跳过这个batch", "lr除以10", "lr降", "降lr", "学习率降",
                      "降低学习率", "学习率除以10", "再往前退", "再出问题"),
                     "say what changes when it resumes"),
            KeyPoint("compare with a clean run at the same step, same seed",
                     ("same step", "same steps", "same seed", "clean run", "clean reference",
                      "reference run", "run before the failure", "pre-failure", "pre-failure trend",
                      "earlier trend", "past the failure", "well past", "keeps learning",
                      "still learning", "stays finite well past", "stays finite past", "同一个step",
                      "同一step", "同一步", "相同seed", "同seed", "出事前的趋势", "对得上",
                      "仍然finite", "跑过原来出事"),
                     "say how you prove the recovery"),
            KeyPoint("keep the evidence: bad state, batch, gradients",
                     ("evidence", "snapshot", "save the state", "saved the state", "dump the state",
                      "bad batch", "证据", "快照", "保存现场", "保存"),
                     "say what is kept for the post-mortem", bonus=True),
        ],
        must_not=[
            WrongClaim("keep training through the NaN",
                       ("just keep training", "keep training through", "train through it",
                        "averages out", "average out", "from the current weights", "从当前权重继续",
                        "继续训练就行", "接着训就行"),
                       "one update with NaN gradients makes every weight NaN: nothing trains "
                       "through it",
                       "The system should just keep training; a NaN averages out."),
            WrongClaim("a fixed threshold or finishing is the check",
                       ("below 0.1", "under 0.1", "0.1以下", "降到0.1", "低于0.1",
                        "success is the run finishing", "run finishing", "eyeball the curve",
                        "eyeball", "a day later", "跑完就说明", "跑完就算成功"),
                       "a fixed threshold measures where the checkpoint was, not the "
                       "recovery (Lab 08, section 7): compare the loss at the same step "
                       "with a clean run",
                       "Recovery worked: the loss is below 0.1 within 30 steps."),
            WrongClaim("restart from scratch or with another seed",
                       ("restart the run from scratch", "from scratch", "different seed",
                        "another seed", "new seed", "换个seed", "换一个seed", "从头开始",
                        "从头训练", "从头跑"),
                       "a restart from scratch throws away days of compute, and a new seed "
                       "makes the recovery unprovable; roll back to the last good checkpoint",
                       "Restart the run from scratch with a different seed."),
            WrongClaim("restart without skipping the batches or checking the checkpoint",
                       ("不用跳过数据", "不用检查checkpoint", "不用跳过", "no need to skip",
                        "without skipping the data"),
                       "the offending batches would fail again, and a checkpoint written "
                       "after the NaN may hold NaN weights",
                       "Restart from the latest checkpoint, no need to skip anything."),
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
        good_answers=[
            "A guard between backward and optimizer.step should have seen the non-finite loss "
            "or grad norm, dropped that update and saved the evidence, then rolled back on "
            "its own to the last checkpoint whose weights and optimizer state are all finite, "
            "skipped the batches around the failure, and carried on; if it failed again at "
            "the same place, go one checkpoint further back and cut the LR by 10x, and after "
            "a few retries stop and page someone. Every rank must take the same decision. To "
            "check the recovery: compare its loss at the same step (and averaged over some "
            "steps) with the run before the failure or a clean reference, make sure it stays "
            "finite well past the failure point and keeps learning, and confirm the events "
            "were logged and the replay is deterministic.",
            "系统应该自动做：在 optimizer.step 之前发现 loss/grad norm 不是 finite，"
            "丢掉这次更新、保存现场，回滚到最近一个验证过的（权重和 optimizer state 都 "
            "finite）checkpoint，跳过出问题附近的 batch "
            "继续训；同一个地方再出问题就再往前退、LR 除以 10；超过重试次数就停下来报警。所有 "
            "rank 要一致。检查恢复效果：看同一个 step 上和出事前的趋势 / clean run 的 loss "
            "是否对得上，跑过原来出事的 step 之后仍然 finite 且在下降，事件都有日志。",
            "Auto: skip the bad update, roll back to a validated checkpoint, skip the "
            "batches, cut the LR on recurrence. Verify: the loss at the same step matches the "
            "pre-failure trend, well past the failure.",
        ],
        wrong_answers=[
            "The system should just keep training; a NaN is one bad step and averages out. To "
            "check, eyeball the curve a day later.",
            "系统应该自动从最新的 checkpoint 重启，不用跳过数据，也不用检查 "
            "checkpoint；重启后 30 步内 loss 降到 0.1 以下就说明恢复成功。",
            "It should automatically restart the run from scratch with a different seed so "
            "the bad batch is avoided; success is the run finishing.",
        ],
    ),
]
