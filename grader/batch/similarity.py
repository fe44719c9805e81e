"""Pairwise code similarity across a batch, for a person to review: which submissions share code beyond the
handout, where, and how much. Never a verdict: nothing here touches a score.

Fingerprinting is copydetect's (MOSS's winnowing on Pygments tokens: identifiers become `V`, function names
`F`, strings `S`, comments and whitespace vanish, so renamed variables, changed comments and reformatting
still match; reordered functions keep their fingerprints, since winnowing ignores order). What this module
adds on top:

- **Per file, summed per submission.** Every `.mlu/.cpp/.h` (tokenised as C++) and `.py` file of a
  submission is fingerprinted on its own (concatenating files would invent k-grams across file ends), and a
  submission's fingerprints are the union of its files'. A pair's *share of A in B* is the part of A's
  (non-template) tokens covered by fingerprints that also occur anywhere in B, copydetect's measure summed
  over A's files: files may be renamed, split or merged and still match.
- **Template subtracted.** Every k-gram of the instructor's template (`--template DIR`, and the assignment's
  starter folder `assignments/<name>/<[similarity] starter>` when it exists) is copydetect boilerplate: it
  neither counts as shared nor as the student's own code.
- **The class's common code subtracted** (MOSS's `-m`, as a share of the class): a passage held by more than
  `common_share` of the distinct submissions is template too, so a fill-in-the-blank lab needs no `--template`;
  below that, a passage weighs less the more submissions hold it (`drop_common`), and coverage, shares and
  `min_shared` count weighted characters.
- **Identical submissions** (same content hash, the build cache's key) are compared once and reported as
  identical (unless what they hold is the template and little else).
- **Side by side.** For each listed pair, the matching regions are paired up (A's file:lines next to B's)
  for the dashboard; `similarity.csv` lists every pair at or above the threshold.

    report = compare_submissions(members, template_dirs=[Path("handout/")], settings=SimilaritySettings())
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import os
import re
import stat
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.batch.exports import csv_cell
from grader.i18n import _

if TYPE_CHECKING:
    from grader.batch.exports import ClassRow

C_SUFFIXES = (".mlu", ".cpp", ".cc", ".cxx", ".h", ".hpp")
PY_SUFFIXES = (".py",)
FAMILIES = {"cpp": C_SUFFIXES, "python": PY_SUFFIXES}  # Pygments lexer name -> file suffixes
IGNORED_DIRS = frozenset({"__pycache__", ".git", "__MACOSX", ".ipynb_checkpoints", ".pytest_cache", "build"})
MAX_FILE_BYTES = 256 << 10  # a kernel source larger than this is not hand-written
MAX_SUBMISSION_BYTES = 2 << 20
MAX_FILES = 200
MAX_REGIONS = 12  # per pair, in the side-by-side view
MAX_REGION_LINES = 40
MAX_VIEWS = 60  # pairs with a side-by-side view in the dashboard (similarity.csv lists them all)
MIN_COMMON = 3  # a passage this few submissions share is never template, however small the class


# ------------------------------------------------------------------------------------------ settings


@dataclass(frozen=True)
class SimilaritySettings:
    """How pairs are found and which are listed. Defaults match grader.spec.models.SimilaritySpec."""

    threshold: float = 0.6  # a pair is listed when the larger of its two shares reaches this
    noise_threshold: int = 25  # k: shortest match counted, in filtered characters (copydetect noise_t)
    guarantee_threshold: int = 30  # matches this long are always found (copydetect guarantee_t)
    min_shared: int = 50  # weighted filtered characters A and B must share before a pair is listed at all
    common_share: float = 0.5  # a passage in more than this share of the class's submissions is template (MOSS -m)

    @property
    def window(self) -> int:
        return self.guarantee_threshold - self.noise_threshold + 1


@dataclass(frozen=True)
class SimilarityOptions:
    """What `grade batch` passes in: `--template DIR` (repeatable), `--similarity-threshold X` (overrides
    assignment.toml), `--no-similarity`."""

    template: tuple[Path, ...] = ()
    threshold: float | None = None
    enabled: bool = True


def check_options(options: SimilarityOptions | None) -> None:
    """Raises ValueError for options that would only fail after the grading: a template folder that does not
    exist, a threshold outside (0, 1]."""
    if options is None or not options.enabled:
        return
    missing = [str(t) for t in options.template if not Path(t).is_dir()]
    if missing:
        raise ValueError(f"--template: no such folder: {', '.join(missing)}")
    if options.threshold is not None and not 0.0 < options.threshold <= 1.0:
        raise ValueError(f"--similarity-threshold must be in (0, 1], got {options.threshold}")


def settings_for(assignment: str, options: SimilarityOptions | None = None) -> tuple[SimilaritySettings, list[Path]]:
    """The assignment's [similarity] settings with the command line's overrides, and the template folders:
    the command line's, then the assignment's starter folder when it exists."""
    from grader.spec import load_assignment
    from grader.spec.loader import assignment_dir

    options = options or SimilarityOptions()
    spec = load_assignment(assignment)
    declared = spec.similarity
    values: dict[str, Any] = {name: getattr(declared, name)
                              for name in ("threshold", "noise_threshold", "guarantee_threshold", "min_shared",
                                           "common_share")}
    if options.threshold is not None:
        values["threshold"] = options.threshold
    settings = SimilaritySettings(**values)
    if not 0.0 < settings.threshold <= 1.0:
        raise ValueError(f"similarity threshold must be in (0, 1], got {settings.threshold}")
    templates = [Path(t) for t in options.template]
    if declared.starter:
        folder = assignment_dir(assignment) / declared.starter
        if folder.is_dir():
            templates.append(folder)
    return settings, templates


# ------------------------------------------------------------------------------------------ sources


@dataclass(frozen=True)
class Member:
    """One student of the class as the comparison sees them."""

    student_id: str
    name: str
    slug: str
    root: Path | None  # the submission folder; None when intake failed
    content_hash: str


@dataclass
class SourceFile:
    rel: str  # path inside the submission, posix
    language: str  # "cpp" | "python"
    text: str


def _language(name: str) -> str | None:
    lowered = name.lower()
    for language, suffixes in FAMILIES.items():
        if lowered.endswith(suffixes):
            return language
    return None


def read_sources(root: Path) -> tuple[list[SourceFile], list[str]]:
    """The source files under `root` (never following links: a submission folder is the student's), with
    size caps; returns (files, notes about what was skipped)."""
    files: list[SourceFile] = []
    notes: list[str] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in IGNORED_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            language = _language(name)
            if language is None:
                continue
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            if not stat.S_ISREG(info.st_mode):
                continue  # links and specials are never read
            if info.st_size > MAX_FILE_BYTES or total + info.st_size > MAX_SUBMISSION_BYTES or len(files) >= MAX_FILES:
                notes.append(_("{file}: skipped (over the size caps)").format(file=rel))
                continue
            total += info.st_size
            with open(path, "rb") as fh:
                raw = fh.read(MAX_FILE_BYTES + 1)
            if b"\0" in raw:
                notes.append(_("{file}: skipped (binary)").format(file=rel))
                continue
            files.append(SourceFile(rel, language, raw.decode("utf-8", errors="replace")))
    return files, notes


# ------------------------------------------------------------------------------------------ fingerprints


@dataclass
class FileFingerprint:
    rel: str
    language: str
    fp: Any  # copydetect.CodeFingerprint
    line_starts: list[int] = field(default_factory=list)  # raw offset of each line's first character

    @property
    def coverage(self) -> float:
        return float(self.fp.token_coverage)


@dataclass
class SubmissionPrints:
    files: list[FileFingerprint]
    union: dict[str, set]  # language -> every fingerprint hash of the submission's files in that language
    coverage: float  # the submission's own (non-template) tokens under fingerprints

    def by_language(self, language: str) -> list[FileFingerprint]:
        return [f for f in self.files if f.language == language]


def stable_kgram_hashes(string: str, k: int):  # noqa: ANN201 - numpy int64 array
    """Every k-gram of `string` hashed to 64 bits, the same in every process and run: a polynomial rolling
    hash mod 2^64 with splitmix64's finaliser. Replaces copydetect's `hashed_kgrams`, which uses Python's
    `hash()`: salted per process, so two runs over the same class would winnow different fingerprints and
    list slightly different shares."""
    import numpy as np

    n = len(string) - k + 1
    if n <= 0:
        return np.array([], dtype=np.int64)
    codes = np.frombuffer(string.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    h = np.zeros(n, dtype=np.uint64)
    base = np.uint64(1099511628211)
    with np.errstate(over="ignore"):
        for j in range(k):
            h = h * base + codes[j : j + n]
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
    return h.view(np.int64)


@contextlib.contextmanager
def stable_hashes() -> Iterator[None]:
    """copydetect with `stable_kgram_hashes` in place of its salted k-gram hash, for the duration."""
    import copydetect.utils

    saved = copydetect.utils.hashed_kgrams
    copydetect.utils.hashed_kgrams = stable_kgram_hashes
    try:
        yield
    finally:
        copydetect.utils.hashed_kgrams = saved


class Fingerprinter:
    """copydetect fingerprints for one comparison (use inside `stable_hashes()`)."""

    def __init__(self, settings: SimilaritySettings, template_dirs: Sequence[Path] = ()) -> None:
        import numpy as np
        from copydetect import CodeFingerprint

        self._code_fingerprint = CodeFingerprint
        self.settings = settings
        self.template_files: list[str] = []
        self.template_notes: list[str] = []
        collected: dict[str, list] = defaultdict(list)
        seen: set[tuple[str, str]] = set()
        for folder in template_dirs:
            sources, notes = read_sources(Path(folder))
            self.template_notes += [_("template {folder}: {note}").format(folder=folder, note=n) for n in notes]
            for src in sources:
                self.template_files.append(f"{folder}/{src.rel}")
                digest = (src.language, hashlib.sha256(src.text.encode("utf-8", errors="replace")).hexdigest())
                if digest in seen:
                    continue
                seen.add(digest)
                # every k-gram (window 1) of the template, as copydetect does for boilerplate_dirs
                fp = CodeFingerprint(src.rel, settings.noise_threshold, 1, language=src.language,
                                     fp=io.StringIO(src.text))
                collected[src.language].extend(fp.hashes)
        self.boilerplate = {lang: np.unique(np.array(hashes)) for lang, hashes in collected.items()}
        self._cache: dict[tuple[str, str], Any] = {}

    def file(self, src: SourceFile) -> FileFingerprint:
        key = (src.language, hashlib.sha256(src.text.encode("utf-8", errors="replace")).hexdigest())
        fp = self._cache.get(key)
        if fp is None:  # the same text (a shared header, a copied file) is fingerprinted once
            fp = self._code_fingerprint(src.rel, self.settings.noise_threshold, self.settings.window,
                                        self.boilerplate.get(src.language, []), language=src.language,
                                        fp=io.StringIO(src.text))
            self._cache[key] = fp
        starts = [0] + [m.end() for m in re.finditer("\n", src.text)]
        return FileFingerprint(src.rel, src.language, fp, starts)

    def submission(self, sources: Iterable[SourceFile]) -> SubmissionPrints:
        return _prints([self.file(s) for s in sources])


def _prints(files: list[FileFingerprint]) -> SubmissionPrints:
    union: dict[str, set] = defaultdict(set)
    for f in files:
        union[f.language] |= f.fp.hashes
    return SubmissionPrints(files, dict(union), sum(f.coverage for f in files))


def common_limit(submissions: int, settings: SimilaritySettings) -> int:
    """A passage held by more than this many distinct submissions is the class's template (MOSS's -m, as a
    share of the class: a fill-in-the-blank lab's handout, or the one obvious way to fill a blank)."""
    return max(MIN_COMMON, int(settings.common_share * submissions))


def drop_common(prints: dict[str, SubmissionPrints], settings: SimilaritySettings) -> int:
    """The class's common code, by how many distinct submissions hold each k-gram (counted over every k-gram,
    not the winnowed ones, so a passage is recognised wherever winnowing sampled it): a k-gram held by more
    than `common_limit` of them becomes boilerplate, as the template's are (removed from the fingerprints and
    from the own-code coverage); below that, a passage's weight as evidence fades as more of the class holds
    it: 1 when only two submissions hold it, 1/(limit-1) at the limit. Each file's coverage and every share
    are then counted in weighted characters (`fp.weights`, one per filtered character), so two honest answers
    sharing the one obvious way to fill a blank score low, a copy (which shares the rare code too) high.
    Returns how many k-grams were dropped."""
    import numpy as np

    limit = common_limit(len(prints), settings)
    if len(prints) <= limit:
        return 0
    k = settings.noise_threshold
    held: dict[str, list] = defaultdict(list)  # language -> each submission's distinct k-grams
    for sub in prints.values():
        for language in sub.union:
            grams = [stable_kgram_hashes(f.fp.filtered_code, k) for f in sub.by_language(language)]
            held[language].append(np.unique(np.concatenate(grams)))
    counted = {language: np.unique(np.concatenate(arrays), return_counts=True) for language, arrays in held.items()}
    done: set[int] = set()
    for key, sub in prints.items():
        for f in sub.files:
            if id(f.fp) in done:
                continue
            done.add(id(f.fp))  # identical files share one fingerprint object
            values, counts = counted[f.language]
            grams = stable_kgram_hashes(f.fp.filtered_code, k)
            holders = counts[np.searchsorted(values, grams)] if len(grams) else np.array([], dtype=np.int64)
            fp = f.fp
            drop = set(grams[holders > limit].tolist())
            fp.hashes = {h for h in fp.hashes if int(h) not in drop}
            fp.hash_idx = {h: i for h, i in fp.hash_idx.items() if int(h) not in drop}
            gram_weight = np.clip(1.0 - (holders - 2) / max(1, limit - 1), 0.0, 1.0)
            gram_weight[holders > limit] = 0.0
            weights = np.zeros(len(fp.filtered_code))
            for j in range(min(k, len(fp.filtered_code))):  # a character weighs as its weightiest k-gram
                span = weights[j : j + len(gram_weight)]
                np.maximum(span, gram_weight[: len(span)], out=span)
            fp.weights = weights
            fp.token_coverage = _weighted(fp, _covered_slices(fp, k))
        prints[key] = _prints(sub.files)
    return sum(int((c > limit).sum()) for _, c in counted.values())


def _covered_slices(fp: Any, k: int):  # noqa: ANN202 - 2xN numpy array
    """The stretches of `fp`'s filtered code under its (kept) fingerprints."""
    from copydetect.utils import get_copied_slices

    np = __import__("numpy")
    idx = [i for positions in fp.hash_idx.values() for i in positions]
    return get_copied_slices(np.array(idx, dtype=np.int64), k)


def _weighted(fp: Any, slices) -> float:  # noqa: ANN001 - numpy
    """Characters in `slices` of `fp`'s filtered code, each by its weight when the class's common code was
    weighed (drop_common), else each 1."""
    np = __import__("numpy")
    if slices is None or slices.shape[1] == 0:
        return 0.0
    weights = getattr(fp, "weights", None)
    if weights is None:
        return float((slices[1] - slices[0]).sum())
    cumulative = np.concatenate([[0.0], np.cumsum(weights)])
    ends = np.minimum(slices[1].astype(np.int64), len(weights))
    return float((cumulative[ends] - cumulative[slices[0].astype(np.int64)]).sum())


# ------------------------------------------------------------------------------------------ comparison


@dataclass
class Region:
    """One stretch of A's code and the stretch of B's it matches."""

    file_a: str
    lines_a: tuple[int, int]  # 1-based, inclusive
    code_a: str
    file_b: str
    lines_b: tuple[int, int]
    code_b: str
    tokens: int  # filtered characters matched in A


@dataclass
class Pair:
    a: str  # student ids, a < b
    b: str
    name_a: str
    name_b: str
    slug_a: str
    slug_b: str
    share_a: float  # part of A's own code found in B
    share_b: float
    shared: int  # filtered characters in matches: the smaller of A's and B's count
    identical: bool = False  # same content hash: byte-for-byte the same submission
    files_a: list[str] = field(default_factory=list)
    files_b: list[str] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)
    cluster: int | None = None

    @property
    def score(self) -> float:
        return max(self.share_a, self.share_b)


@dataclass
class Cluster:
    index: int
    members: list[str]
    pairs: int
    top: float


@dataclass
class SimilarityReport:
    settings: SimilaritySettings
    students: int  # compared (with at least one source file)
    distinct: int  # distinct submissions (by content hash) among them
    comparisons: int  # distinct pairs compared
    pairs: list[Pair]  # at or above the threshold, highest first
    clusters: list[Cluster]  # connected groups of more than two students
    template_files: list[str]
    seconds: float
    skipped: list[str] = field(default_factory=list)  # students without sources, and why
    notes: list[str] = field(default_factory=list)
    max_views: int = MAX_VIEWS
    max_regions: int = MAX_REGIONS
    histogram: list[int] = field(default_factory=list)  # every compared pair's score in 10 bins of 10%
    phases: dict[str, float] = field(default_factory=dict)  # seconds: fingerprint, compare, regions

    @property
    def viewed(self) -> list[Pair]:
        return self.pairs[: self.max_views]


def _copied_slices(fp: Any, hashes: set, k: int):  # noqa: ANN202 - 2xN numpy array
    from copydetect.utils import get_copied_slices

    np = __import__("numpy")
    inter = fp.hashes & hashes
    if not inter:
        return None
    idx = np.concatenate([np.asarray(fp.hash_idx[h]) for h in inter])
    return get_copied_slices(idx, k)


def _shared_tokens(prints: SubmissionPrints, other: SubmissionPrints, k: int) -> tuple[int, list[str]]:
    """Filtered characters of `prints` covered by fingerprints found anywhere in `other` (same language)."""
    total = 0
    files: list[str] = []
    for f in prints.files:
        hashes = other.union.get(f.language)
        if not hashes:
            continue
        slices = _copied_slices(f.fp, hashes, k)
        if slices is None or slices.shape[1] == 0:
            continue
        total += _weighted(f.fp, slices)
        files.append(f.rel)
    return round(total), files


def _to_raw(fp: Any, positions):  # noqa: ANN001, ANN202 - numpy in, numpy out
    """Filtered-code offsets to offsets in the file's text (copydetect's own conversion)."""
    np = __import__("numpy")
    positions = np.asarray(positions, dtype=np.int64)
    if len(fp.offsets) == 0:
        return positions
    return positions + fp.offsets[:, 1][np.clip(np.searchsorted(fp.offsets[:, 0], positions), 0,
                                                fp.offsets.shape[0] - 1)]


def _line_span(f: FileFingerprint, start: int, end: int) -> tuple[int, int]:
    """1-based first and last line holding the raw offsets [start, end)."""
    import bisect

    first = bisect.bisect_right(f.line_starts, start) - 1
    last = bisect.bisect_right(f.line_starts, max(start, end - 1)) - 1
    return first + 1, max(first, last) + 1


def _code(f: FileFingerprint, lines: tuple[int, int]) -> str:
    chunk = f.fp.raw_code.split("\n")[lines[0] - 1 : lines[1]]  # the lines line_starts counts
    if len(chunk) > MAX_REGION_LINES:
        chunk = chunk[:MAX_REGION_LINES] + [_("... ({n} more lines)").format(n=len(chunk) - MAX_REGION_LINES)]
    return "\n".join(chunk)


def _regions(a: SubmissionPrints, b: SubmissionPrints, k: int) -> list[Region]:
    """A's matched stretches, each paired with the stretch of B holding most of the same fingerprints;
    neighbouring stretches that continue on both sides (a template line or two between them) are merged."""
    from copydetect.utils import get_copied_slices

    np = __import__("numpy")
    found: list[tuple[FileFingerprint, FileFingerprint, tuple[int, int], tuple[int, int], int]] = []
    for fa in a.files:
        for fb in b.by_language(fa.language):
            inter = fa.fp.hashes & fb.fp.hashes
            if not inter:
                continue
            points = sorted((ia, ib) for h in inter for ia in fa.fp.hash_idx[h][:4] for ib in fb.fp.hash_idx[h][:4])
            slices = get_copied_slices(np.array([p[0] for p in points]), k)
            for start, end in zip(slices[0], slices[1], strict=True):
                ibs = np.array(sorted(ib for ia, ib in points if start <= ia < end))
                b_slices = get_copied_slices(ibs, k)
                best = int(np.argmax(b_slices[1] - b_slices[0]))
                raw_a = _to_raw(fa.fp, [start, end])
                raw_b = _to_raw(fb.fp, [b_slices[0][best], b_slices[1][best]])
                found.append((fa, fb, _line_span(fa, int(raw_a[0]), int(raw_a[1])),
                               _line_span(fb, int(raw_b[0]), int(raw_b[1])), int(end - start)))
    # one stretch of A may match several of B's files: keep the longest per stretch of A
    best: dict[tuple[str, tuple[int, int]], tuple] = {}
    for item in found:
        key = (item[0].rel, item[2])
        if key not in best or item[4] > best[key][4]:
            best[key] = item
    merged: list[list] = []
    for fa, fb, la, lb, tokens in sorted(best.values(), key=lambda r: (r[0].rel, r[1].rel, r[2], r[3])):
        last = merged[-1] if merged else None
        if (last is not None and last[0] is fa and last[1] is fb and la[0] <= last[2][1] + 2
                and last[3][0] <= lb[0] <= last[3][1] + 2):
            last[2] = (last[2][0], max(last[2][1], la[1]))
            last[3] = (last[3][0], max(last[3][1], lb[1]))
            last[4] += tokens
        else:
            merged.append([fa, fb, la, lb, tokens])
    merged = sorted(merged, key=lambda r: -r[4])[:MAX_REGIONS]
    return [Region(fa.rel, la, _code(fa, la), fb.rel, lb, _code(fb, lb), tokens)
            for fa, fb, la, lb, tokens in sorted(merged, key=lambda r: (r[0].rel, r[2]))]


def _clusters(pairs: list[Pair]) -> list[Cluster]:
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p in pairs:
        ra, rb = find(p.a), find(p.b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, list[str]] = defaultdict(list)
    for x in list(parent):
        groups[find(x)].append(x)
    big = sorted((sorted(m) for m in groups.values() if len(m) > 2), key=lambda m: (-len(m), m))
    clusters = []
    for i, members in enumerate(big, start=1):
        inside = [p for p in pairs if p.a in members]
        for p in inside:
            p.cluster = i
        clusters.append(Cluster(i, members, len(inside), max(p.score for p in inside)))
    return clusters


def _fingerprint_members(printer: Fingerprinter, members: Sequence[Member]):  # noqa: ANN202
    """Identical submissions (same content hash) are fingerprinted and compared once: returns
    (content key -> members, content key -> prints, skipped, notes)."""
    groups: dict[str, list[Member]] = defaultdict(list)
    prints: dict[str, SubmissionPrints] = {}
    skipped: list[str] = []
    notes: list[str] = []
    for m in sorted(members, key=lambda m: m.student_id):
        if m.root is None or not Path(m.root).is_dir():
            skipped.append(_("{student}: no submission folder").format(student=m.student_id))
            continue
        key = m.content_hash or f"student:{m.student_id}"
        if key not in prints:
            sources, file_notes = read_sources(Path(m.root))
            notes += [f"{m.student_id}: {n}" for n in file_notes]
            if not sources:
                skipped.append(_("{student}: no .mlu/.cpp/.h/.py files").format(student=m.student_id))
                continue
            prints[key] = printer.submission(sources)
        groups[key].append(m)
    return groups, prints, skipped, notes


def compare_submissions(members: Sequence[Member], template_dirs: Sequence[Path] = (),
                        settings: SimilaritySettings | None = None) -> SimilarityReport:
    """Every pair of `members` compared; the pairs at or above the threshold, with their matching regions."""
    started = time.monotonic()
    settings = settings or SimilaritySettings()
    k = settings.noise_threshold
    with stable_hashes():
        printer = Fingerprinter(settings, template_dirs)
        groups, prints, skipped, notes = _fingerprint_members(printer, members)
        if drop_common(prints, settings):
            notes.append(_("passages found in more than {limit} of the {n} distinct submissions count as template")
                         .format(limit=common_limit(len(prints), settings), n=len(prints)))
    notes = printer.template_notes + notes
    phases = {"fingerprint": time.monotonic() - started}

    keys = sorted(groups)
    shared: dict[tuple[str, str], tuple[float, float, int, list[str], list[str]]] = {}
    histogram = [0] * 10
    comparisons = 0
    for i in range(len(keys)):
        pa = prints[keys[i]]
        for j in range(i + 1, len(keys)):
            pb = prints[keys[j]]
            comparisons += 1
            if all(pa.union[lang].isdisjoint(hashes) for lang, hashes in pb.union.items() if lang in pa.union):
                histogram[0] += 1
                continue
            tok_a, files_a = _shared_tokens(pa, pb, k)
            tok_b, files_b = _shared_tokens(pb, pa, k)
            share_a = min(1.0, tok_a / pa.coverage) if pa.coverage else 0.0
            share_b = min(1.0, tok_b / pb.coverage) if pb.coverage else 0.0
            histogram[min(9, int(10 * max(share_a, share_b)))] += 1
            if max(share_a, share_b) >= settings.threshold and min(tok_a, tok_b) >= settings.min_shared:
                shared[(keys[i], keys[j])] = (share_a, share_b, min(tok_a, tok_b), files_a, files_b)

    phases["compare"] = time.monotonic() - started - phases["fingerprint"]
    pairs: list[Pair] = []

    def add(ma: Member, mb: Member, share_a: float, share_b: float, tokens: int, identical: bool,
            files_a: list[str], files_b: list[str], regions: list[Region]) -> None:
        if ma.student_id > mb.student_id:
            ma, mb, share_a, share_b, files_a, files_b = mb, ma, share_b, share_a, files_b, files_a
            regions = [Region(r.file_b, r.lines_b, r.code_b, r.file_a, r.lines_a, r.code_a, r.tokens) for r in regions]
        pairs.append(Pair(ma.student_id, mb.student_id, ma.name, mb.name, ma.slug, mb.slug, share_a, share_b, tokens,
                          identical, files_a, files_b, regions))

    for key in keys:  # identical submissions: every pair within the group, unless they are all template
        group = groups[key]
        if prints[key].coverage < settings.min_shared:
            continue
        files = [f.rel for f in prints[key].files]
        for x in range(len(group)):
            for y in range(x + 1, len(group)):
                add(group[x], group[y], 1.0, 1.0, int(prints[key].coverage), True, files, files, [])
    for (ka, kb), (share_a, share_b, tokens, files_a, files_b) in shared.items():
        regions = _regions(prints[ka], prints[kb], k)
        for ma in groups[ka]:
            for mb in groups[kb]:
                add(ma, mb, share_a, share_b, tokens, False, files_a, files_b, regions)
    pairs.sort(key=lambda p: (-p.score, -p.shared, p.a, p.b))
    clusters = _clusters(pairs)
    phases["regions"] = time.monotonic() - started - phases["fingerprint"] - phases["compare"]
    return SimilarityReport(
        settings=settings, students=sum(len(g) for g in groups.values()), distinct=len(keys),
        comparisons=comparisons, pairs=pairs, clusters=clusters, template_files=printer.template_files,
        seconds=time.monotonic() - started, skipped=skipped, notes=notes, histogram=histogram, phases=phases)


# ------------------------------------------------------------------------------------------ exports


def similarity_csv(report: SimilarityReport) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["student_a", "name_a", "student_b", "name_b", "similarity", "share_of_a_in_b", "share_of_b_in_a",
                     "shared_tokens", "identical", "cluster", "files_a", "files_b"])
    for p in report.pairs:
        writer.writerow([csv_cell(v) for v in (
            p.a, p.name_a, p.b, p.name_b, f"{p.score:.3f}", f"{p.share_a:.3f}", f"{p.share_b:.3f}", p.shared,
            "yes" if p.identical else "", p.cluster or "", " ".join(p.files_a), " ".join(p.files_b))])
    return out.getvalue()


def members_of(rows: Sequence[ClassRow]) -> list[Member]:
    return [Member(r.submission.student_id, r.submission.name or r.submission.student_id, r.submission.slug,
                   r.submission.path, r.submission.content_hash) for r in rows]


def similarity_step(rows: Sequence[ClassRow], assignment: str, out_dir: Path,
                    options: SimilarityOptions | None = None) -> tuple[SimilarityReport | None, list[str]]:
    """The batch's similarity step: compares the class, writes `out_dir/similarity.csv`; returns the report
    (None when disabled or failed) and notes for the summary. Never raises: a failure here must not cost
    the grades."""
    from grader.atomic_file import atomic_write_text

    options = options or SimilarityOptions()
    if not options.enabled:
        return None, []
    try:
        settings, templates = settings_for(assignment, options)
        missing = [str(t) for t in templates if not Path(t).is_dir()]
        if missing:
            return None, [_("similarity not computed: template folder not found: {folders}").format(
                folders=", ".join(missing))]
        report = compare_submissions(members_of(rows), templates, settings)
        atomic_write_text(out_dir / "similarity.csv", similarity_csv(report))
    except Exception as exc:  # noqa: BLE001 - reported, and the grades stand
        return None, [_("similarity not computed: {error}").format(error=repr(exc))]
    notes = [] if templates else [_("similarity: no template given (--template DIR): handout code counts as shared")]
    return report, notes
