"""ray.util.state.list_actors: the stand-in's actors live only as long as the driver that made them, so none
is ALIVE when another driver asks."""


def list_actors(filters=None, **_kw):
    return []
