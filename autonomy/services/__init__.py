"""Calibration, autonomy evaluation and transitions, and the autonomy cycle (one agent, or a set of agents at once)."""

from autonomy.services.agent_sets import CycleSetResult, autonomy_cycles_run
from autonomy.services.calibration import calibration_compute, calibration_compute_for_agents
from autonomy.services.cycle import autonomy_cycle_run
from autonomy.services.episodes import (
    LOCK_NAMESPACE_CYCLE,
    EpisodeLog,
    agent_cycle_lock,
    agents_cycle_lock,
    autonomy_history_purge,
    episode_finish,
    episode_restart,
    episode_start,
)
from autonomy.services.evaluation import (
    action_autonomy_revert,
    action_autonomy_stop,
    autonomy_evaluate,
    autonomy_evaluate_for_agents,
    autonomy_level_decide,
    autonomy_transition_approve,
    autonomy_transition_reject,
)

__all__ = [
    "CycleSetResult",
    "EpisodeLog",
    "LOCK_NAMESPACE_CYCLE",
    "action_autonomy_revert",
    "action_autonomy_stop",
    "agent_cycle_lock",
    "autonomy_history_purge",
    "agents_cycle_lock",
    "autonomy_cycle_run",
    "autonomy_cycles_run",
    "autonomy_evaluate",
    "autonomy_evaluate_for_agents",
    "autonomy_level_decide",
    "autonomy_transition_approve",
    "autonomy_transition_reject",
    "calibration_compute",
    "calibration_compute_for_agents",
    "episode_finish",
    "episode_restart",
    "episode_start",
]
