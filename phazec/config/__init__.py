"""The config: Hydra's schema of every group (`schema`), the check that turns a composed config into
typed settings (`settings`), Hydra's command line (`command_line`: messages, sweeps, one preset composed),
the shipped presets (`presets`), a bad preset file named by path and line (`preset_files`) and the run
directories (`rundir`)."""
