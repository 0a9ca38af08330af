class PlacementGroupSchedulingStrategy:
    def __init__(self, placement_group, placement_group_bundle_index=0, **_kw):
        self.placement_group, self.index = placement_group, placement_group_bundle_index
