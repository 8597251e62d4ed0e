"""A stand-in for activegraph, for forktrial's tests only.

activegraph cannot be installed where forktrial is tested, and its code does
not belong in forktrial. This package is written from the contract of
activegraph's trial child (python3 -m activegraph.sandbox._child), standard
library only, so that forktrial's activegraph executor can be tested end to
end: it is NOT activegraph, runs no activegraph pack semantics, and a green
test against it says nothing about a real activegraph installation (run
`forktrial preflight` there).
"""

__version__ = "0.0.0+standin"
