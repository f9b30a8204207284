"""The MIRAGE method: decomposer, reasoning chains, synthesizer, the coordinator that runs them, prompts and config."""
