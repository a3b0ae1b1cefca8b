"""Where the demo's model is: the environment variables ``hatchway demo --help`` names (a module of
their own, so that every ``hatchway`` command does not import the demo's servers)."""

ENV_BASE_URL = "HATCHWAY_DEMO_BASE_URL"
ENV_API_KEY = "HATCHWAY_DEMO_API_KEY"
ENV_MODEL = "HATCHWAY_DEMO_MODEL"
