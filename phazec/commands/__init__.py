"""The commands, each a function from a composed config to its result data: `search` (`phazec`, one
model), `common` (`phazec model=[a,b]`), `plan` (`phazec-plan`), `lower` (`phazec-ir`); `setup` turns
checked settings into a lowered model and its evaluator. Each checks the config once, at its entry
(`phazec.config.settings`); nothing below sees the composed config."""
