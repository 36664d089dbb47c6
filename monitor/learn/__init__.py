"""``prefixmon learn``: draft a spec file from recorded runs, with the evidence for every rule.

Deterministic (no model in the loop): one streaming pass over the episodes mines value
provenance (references and their producers, grounded and derived arguments),
invalidations, read/write tools, error-result recognisers and candidate preconditions,
then writes them in the spec-file format (:mod:`prefixmon.rules.specfile`) with their evidence.
Suggested preconditions stay disabled until a person enables them.

Example::

    from prefixmon import Toolset
    from prefixmon.learn import learn, read_transcripts, write_spec

    tools = Toolset.from_openai(definitions)
    spec = learn(read_transcripts(["runs.jsonl"]), tools=tools)
    write_spec(spec, "learned.yaml")
"""

from .evaluate import check_spec as check_spec
from .evaluate import compare_rules as compare_rules
from .learner import Learner as Learner
from .learner import LearnStats as LearnStats
from .learner import Thresholds as Thresholds
from .learner import learn as learn
from .output import diff_spec as diff_spec
from .output import fit_spec as fit_spec
from .output import merge_spec as merge_spec
from .output import render_spec as render_spec
from .output import write_spec as write_spec
from .transcript import SNIFF_BYTES as SNIFF_BYTES
from .transcript import TRANSCRIPTS_GROUP as TRANSCRIPTS_GROUP
from .transcript import Call as Call
from .transcript import CorpusError as CorpusError
from .transcript import Event as Event
from .transcript import Message as Message
from .transcript import Problem as Problem
from .transcript import Transcript as Transcript
from .transcript import TranscriptReader as TranscriptReader
from .transcript import detect_format as detect_format
from .transcript import read_transcripts as read_transcripts
from .transcript import reader_names as reader_names
from .transcript import transcript_reader as transcript_reader

__all__ = (
    "SNIFF_BYTES",
    "TRANSCRIPTS_GROUP",
    "Call",
    "CorpusError",
    "Event",
    "LearnStats",
    "Learner",
    "Message",
    "Problem",
    "Thresholds",
    "Transcript",
    "TranscriptReader",
    "check_spec",
    "compare_rules",
    "detect_format",
    "diff_spec",
    "fit_spec",
    "learn",
    "merge_spec",
    "read_transcripts",
    "reader_names",
    "render_spec",
    "transcript_reader",
    "write_spec",
)
