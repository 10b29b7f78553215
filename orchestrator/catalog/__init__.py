"""Model presets (HF config.json files) and GPU/interconnect presets, as data plus a loader."""
