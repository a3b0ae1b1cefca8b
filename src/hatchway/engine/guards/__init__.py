"""Guards on untrusted tool output (docs/security.md, "Untrusted tool output"): spotlighting, the
detectors and what each does with a finding, and the run's taint."""
