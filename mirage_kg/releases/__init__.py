"""Releases of a source: provenance (which release each graph holds), the difference between two releases, and
updating a graph to a new release in one atomic step."""

from mirage_kg.releases.diff import ReleaseDiff, TripleDifference, graph_lines, triple_difference
from mirage_kg.releases.provenance import ReleaseInfo, citations, record_release, release_of, releases
from mirage_kg.releases.update import UpdateResult, diff_release, update_release

__all__ = ["ReleaseDiff", "ReleaseInfo", "TripleDifference", "UpdateResult", "citations", "diff_release", "graph_lines",
           "record_release", "release_of", "releases", "triple_difference", "update_release"]
