"""TensorBoard tab "HLO Roofline" for hlo_roofline reports (entry point: ``plugin:HloRooflineLoader``)."""
