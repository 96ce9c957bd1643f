"""What methods share: tokenised batches, unlearning losses, optimiser loops, gradients,
LoRA probes and adapters, low-rank sketches, the one-step update and the offline sentence
embedder. Nothing here knows the engine that runs a method."""
