"""Small models written the way users of Flax and Equinox write them, for tests/test_frameworks.py.

Each module builds an abstract training step (``jax.ShapeDtypeStruct`` inputs: nothing is allocated)
and says what the step must cost from the model's shapes alone. Lines the tests look for carry a
``# <- name`` marker, so a test can name the file:line an op must be attributed to.
"""
