from pyinfra.api import deploy


@deploy("slurmrestd")
def slurmrestd() -> None:
    pass
