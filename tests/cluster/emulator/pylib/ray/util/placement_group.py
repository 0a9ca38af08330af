from ray import _pg, _remove_pg

placement_group = _pg
remove_placement_group = _remove_pg
