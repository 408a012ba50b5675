"""Logdirs on other filesystems (``gs://bucket/logs``, ``s3://``): read through TensorBoard's file
API, ``tensorboard.compat.tf.io.gfile``. What a URL is, is the writer's rule
(:func:`hlo_roofline._atomic.is_remote`): the tab reads where the tool writes."""

from __future__ import annotations

from hlo_roofline._atomic import is_remote

__all__ = ["gfile", "is_remote"]


def gfile():
    """TensorBoard's gfile module (imported when a remote logdir is first read)."""
    from tensorboard.compat import tf

    return tf.io.gfile
