"""TEMPORARY stand-in until the helper's breaker is merged."""

from dataclasses import dataclass


@dataclass
class Admission:
    allowed: bool
    retry_after: float = 0.0


async def admit(pk: int) -> Admission:
    return Admission(True)


async def succeeded(pk: int) -> None: ...
async def failed(pk: int) -> None: ...
