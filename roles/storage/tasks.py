from pyinfra.api import deploy


@deploy("storage")
def storage() -> None:
    pass
