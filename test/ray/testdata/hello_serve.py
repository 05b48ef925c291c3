"""A tiny Serve application for the conformance suite (test/ray): GET <route_prefix> answers a greeting."""
import os

from ray import serve


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Hello:
    def __init__(self, suite: str):
        self._suite = suite

    async def __call__(self, request) -> str:
        return f"hello from manta ({self._suite})"


app = Hello.bind(os.environ.get("MANTA_SUITE", "unknown"))
