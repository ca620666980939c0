"""The toy: a small GPT-style Transformer and the counting task it learns.

- ``model``           :class:`~nanlab.toy.model.GPT` and its config: real hyperparameters
  only (norm eps, QK-norm, activation, depth, precision); faults act on it from outside
- ``data``            the counting task, generated on the fly from the step
- ``vocab_parallel``  the embedding and the cross-entropy split over the vocabulary, as
  Megatron-LM splits them over tensor-parallel ranks
"""
