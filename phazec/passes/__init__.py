"""The passes that turn a lowered model into per-device training graphs (norm-rope, tensor parallel,
attention, autodiff, fuse, memory), one module each; `pipeline` runs them as a list built from
`GraphSettings`, `training` tabulates the result per layer."""
