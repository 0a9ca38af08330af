class RayError(Exception):
    pass


class GetTimeoutError(RayError, TimeoutError):
    pass


class ActorDiedError(RayError):
    pass


class RayTaskError(RayError):
    pass
