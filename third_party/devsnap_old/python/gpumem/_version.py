# The one version of gpumem: CMakeLists.txt, setup.py and `gpumem --version` read it here.
__version__ = "0.1.0"
