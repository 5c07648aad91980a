"""`tokvera host-agent`: serve network jobs from a local OpenAI-compatible server.

    tokvera host-agent --coordinator http://127.0.0.1:8000 --token-env TOKVERA_HOST_TOKEN \\
        --upstream http://127.0.0.1:8080/v1 --model gemma-3-270m-q4

The agent heartbeats every 15 s (the coordinator says how often), asks for leases (each held
by the coordinator up to 25 s until a job is assigned to this host), runs each
job as a streaming chat completion against its upstream and reports `complete` (TTFT at the
first output token of any kind, thinking included, completion tokens from the server's usage,
elapsed time; read by the grader's stream parser, scans/grader/stream.py) or `fail`.
Coordinator restarts and upstream errors are met with backoff, never a crash; reports are
retried until the coordinator answers (completion is idempotent there, so a retry is safe).

This package does not import Django: it runs on host machines with httpx only (and the
grader's stream parser). By concern: config.py (what the agent serves), coordinator.py (its session with the
coordinator), upstream.py (measuring one job), reports.py (completions, group-committed:
several finished jobs in one call),
loop.py (the Agent: heartbeats, leases, slots), command.py (`tokvera host-agent`).
"""

from benchmarks.agent.command import add_arguments, config_from_args, run
from benchmarks.agent.config import AgentConfig
from benchmarks.agent.loop import Agent
from benchmarks.agent.upstream import Outcome, run_upstream

__all__ = ["AgentConfig", "Agent", "Outcome", "run_upstream", "add_arguments", "config_from_args", "run"]
