"""The layout planner: which dp × tp × pp × cp × ep, ZeRO stage, recompute policy and micro-batch fit a model on a
cluster, and which runs fastest. By question: the candidate space and its constraints (`space`), one candidate's
numbers from the same engine as `bill` (`evaluate`), the search with its exact bounds (`search`), ranking by an
objective (`rank`) and the Pareto fronts (`pareto`)."""

from stepbill.engine.plan.search import PlanResult, SearchStats, search
from stepbill.engine.plan.space import Candidate, PlanRequest, parse_fix

__all__ = ["Candidate", "PlanRequest", "PlanResult", "SearchStats", "parse_fix", "search"]
