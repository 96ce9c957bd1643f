"""What methods share: tokenised batches, unlearning losses, optimiser loops, gradients,
LoRA probes and adapters, low-rank sketches and the one-step update. Nothing here knows
the engine that runs a method."""
