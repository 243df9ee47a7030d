"""Marks the distribution as platform-specific: it ships the prebuilt extension collective/_core."""

from setuptools import setup
from setuptools.dist import Distribution


class _BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(distclass=_BinaryDistribution)
