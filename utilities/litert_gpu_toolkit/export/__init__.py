"""Layer 5: a Hugging Face model for a task (`export --task`): loading, wrapping at fixed shapes, generation graphs."""
