"""Type stub for ringloader._core, the private C extension (csrc/python/,
see docs/ARCHITECTURE.md). Use the ringloader package rather than this
module. Names marked "test builds" exist only in a build made with
RINGLOADER_TEST_HOOKS=1 (what `make test` installs)."""

import os
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
    final,
)

from typing_extensions import Buffer, CapsuleType

# What PyUnicode_FSConverter accepts.
_Path = Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]

# A transform spec, as ringloader.transforms compiles it: a real dict whose
# keys are those of TRANSFORM_FIELDS: "kind" ("resize_crop" or
# "random_crop") and "out_h"/"out_w", plus the optional "resize_short",
# "resize_h", "resize_w" (ints), "flip_p" (float), "scale" and "ratio"
# (2-tuples of floats), "filter" (an index into INTERPOLATIONS), "passes"
# (the resize's pass order: 0 Pillow 13's, 1 horizontal first), RandomCrop's
# "pad_*", "pad_mode" (an index into PAD_MODES) and "fill_r/g/b", and "ops"
# (augmentation ops: [(name, args)]).
_TransformSpec = Dict[str, Any]

# The spec's schema, defined once in C: key -> (default, description);
# "kind" -> its allowed values.
TRANSFORM_FIELDS: Dict[str, Tuple[Any, str]]
# The resize's filters, in the C core's order: "bilinear", "bicubic",
# "nearest"; a spec's "filter" is an index into it.
INTERPOLATIONS: Tuple[str, ...]
# RandomCrop's padding modes, in the C core's order: "constant", "edge",
# "reflect", "symmetric"; a spec's "pad_mode" is an index into it.
PAD_MODES: Tuple[str, ...]
# The SIMD levels, lowest first: "c", "sse2", "avx2"; what RINGLOADER_SIMD
# and resample_simd() accept, in any case.
SIMD_LEVELS: Tuple[str, ...]
# Where a "resize_random_crop" window lies, in the C core's order:
# "random_crop" (torchvision's RandomCrop), "center_crop_or_pad" and
# "random_crop_or_pad" (timm's); a spec's "window" is an index into it.
WINDOWS: Tuple[str, ...]
# The keys of Pipeline.stats(), defined once in C (csrc/python/stats.c):
# key -> (kind, description); kind is "count" (int, cumulative), "seconds"
# (float, cumulative) or "gauge" (int, the state now).
STATS_FIELDS: Dict[str, Tuple[str, str]]
test_hooks: int  # test builds: 1

# The bits of a sample's random key (csrc/rng.h): the repeat count of a
# sample in its epoch starts at bit KEY_OCCURRENCE_SHIFT, a replacement's
# attempt at KEY_ATTEMPT_SHIFT, and bit KEY_REPLACEMENT_BIT marks a
# replacement; max_consecutive_errors is at most MAX_CONSECUTIVE_ERRORS.
KEY_OCCURRENCE_SHIFT: int
KEY_ATTEMPT_SHIFT: int
KEY_REPLACEMENT_BIT: int
MAX_CONSECUTIVE_ERRORS: int
ARENA_MAX_BYTES: int  # the largest arena_bytes a Pipeline takes (1 TiB)
MAX_SIDE: int  # the largest output or resize side, in pixels
MAX_VIEWS: int  # the most views a sample may have (transforms.MultiView)
MAX_SHORT_SIZES: int  # the most sizes a RandomShortestSize list may hold
MAX_IOU_OPTIONS: int  # the most sampler_options a RandomIoUCrop may hold

# The augmentation ops' argument layouts, defined once in C
# (csrc/augment/augment.h): op name -> its fields in order, each
# (name, count, record): `count` numbers, or with a record (the same kind
# of tuple) `count` records laid out by it. ringloader/_ops.py packs the
# arguments by these names.
_OpField = Tuple[str, int, Optional[Tuple[Any, ...]]]
OP_ARGS: Dict[str, Tuple[_OpField, ...]]
# op name -> {limit name: value}: bounds the op's check enforces that
# Python checks first (to say why a transform is not fused).
OP_LIMITS: Dict[str, Dict[str, int]]
# The policies' sub-ops by kind number (csrc/augment/policy.c); those with
# a row in the policies' magnitude tables, in row order; AutoAugment's
# policies by the number of its `policy` argument.
POLICY_KINDS: Tuple[str, ...]
POLICY_TABLE_KINDS: Tuple[str, ...]
AUTO_AUGMENT_POLICIES: Tuple[str, ...]
# timm's op names (the kinds of its policies' rows, csrc/augment/timm.c)
# and its op functions (timm_op's `func`), by number.
TIMM_KINDS: Tuple[str, ...]
TIMM_FUNCS: Tuple[str, ...]
# The elements (ops and groups, csrc/augment/group.c) a chain holds.
AUGMENT_MAX_OPS: int

DEFAULT_MAX_PIXELS: int
DEFAULT_MAX_SCANS: int
built_with_liburing: int  # 1 if compiled against liburing, else 0
libjpeg_version: str

class DecodeError(ValueError):
    # Set when the C core raises it; a DecodeError constructed in Python has
    # none of them unless they are assigned.
    path: Optional[str]  # None for decode(), which has no file name
    reason: str  # libjpeg's message
    kind: str  # "corrupt", "truncated", "too_big" or "not_jpeg"
    index: int  # the sample's id, when Pipeline.next() knows it

def decode(
    data: Buffer,
    *,
    max_pixels: int = ...,
    max_scans: int = ...,
    allow_truncated: bool = ...,
    max_decode_bytes: int = ...,  # libjpeg's memory; 0: follows max_pixels
    box: Optional[Tuple[int, int, int, int]] = None,
) -> Tuple[bytes, int, int]:
    """RGB decode of a JPEG, PNG or WebP (the native decoders; other
    formats raise DecodeError): (rgb_bytes, height, width); note height
    comes first. The whole image, or with box=(left, top, width, height)
    that region alone, decoded as a pipeline decodes a crop (ValueError if
    the box is not inside the image)."""

def plan(
    spec: _TransformSpec,
    width: int,
    height: int,
    seed: int,
    epoch: int,
    index: int,
    view: int = 0,
    boxes: Optional[Buffer] = None,
    /,
) -> Tuple[float, float, float, float, bool]:
    """(top, left, height, width, flip): the source box of view ``view``
    of one sample, as floats, as torchvision's get_params would give it."""

def plan_window(
    spec: _TransformSpec,
    width: int,
    height: int,
    seed: int,
    epoch: int,
    index: int,
    view: int = 0,
    boxes: Optional[Buffer] = None,
    /,
) -> Dict[str, Any]:
    """(boxes: the sample's (N, 4) float64 XYXY boxes a RandomIoUCrop draws
    from; its draw: iou_crop, iou_option, iou_rounds, iou_limited, iou_box
    (x, y, w, h in the canvas); a RandomZoomOut's: zoom_out, zoom_canvas
    (the image's left, top and the canvas's w, h).)
    The whole plan of one sample's view: the source box (x, y, w, h), the
    output rectangle it lands in (vx, vy, vw, vh; the rest is padding), the
    flips (flip, vflip), and a RandomCrop's padding: the window's first
    pixel in the resized image (wx, wy) and the resized size it lies on
    (rw, rh; 0 for the geometries without a window), the padding mode the
    place stage runs (pad_mode, "constant" where the window meets no mirrored padding)
    and, for the others, the first resized pixel (rx, ry) of the range the
    box covers; the sample's resampling filter by name (filter: drawn per
    sample under filter_random)."""

def dct_scale(
    spec: _TransformSpec,
    width: int,
    height: int,
    seed: int,
    epoch: int,
    index: int,
    view: int = 0,
    /,
) -> int:
    """m: a JPEG of width x height is decoded at DCT scale m/8 for this
    sample (8: no DCT scaling, so the resample matches torchvision's within
    1 LSB)."""

def augment_draw(
    ops: Sequence[Tuple[str, Sequence[float]]],
    height: int,
    width: int,
    seed: int,
    epoch: int,
    key: int,
    view: int = 0,
    /,
) -> List[List[float]]:
    """The parameters each op of the chain draws for view ``view`` of sample
    (seed, epoch, key) of height x width pixels: what the loader applies, for tests that
    apply torchvision with the same ones."""

def augment(
    rgb: Buffer,
    height: int,
    width: int,
    ops: Sequence[Tuple[str, Sequence[float]]],
    seed: int,
    epoch: int,
    key: int,
    /,
) -> bytes:
    """The chain's image ops on an HWC RGB image, as the loader runs them."""

def check_member(kind: int, data: Buffer, max_digits: int = ..., /) -> Optional[str]:
    # test builds
    """None, or why the member fails core/fields.h's check of that kind
    (1 UTF-8, 2 JSON, 3 int; max_digits: Python's int digit limit)."""

def read_bench(
    paths: Iterable[_Path],
    offsets: Optional[Sequence[int]],
    lengths: Optional[Sequence[int]],
    backend: str,
    threads: int,
    batch: int,
    direct: bool = ...,
) -> Tuple[int, float]:
    # test builds
    """The I/O layer alone: (bytes, seconds). backend is "io_uring" or
    "pread"; offsets None reads whole files (lengths is then ignored)."""

# A target geometry step, torchvision's arguments in its order (see
# csrc/python/boxes.c): ("hflip",), ("vflip",), ("resize", h, w),
# ("crop", top, left, h, w), ("center_crop", h, w),
# ("resized_crop", top, left, h, w, out_h, out_w),
# ("pad", left, top, right, bottom),
# ("affine", angle, tx, ty, scale, shear_x, shear_y, center),
# ("rotate", angle, center), ("perspective", coefficients[8]);
# center (x, y) or None.
_GeomStep = Tuple[Any, ...]

def boxes_map(
    boxes: Buffer, format: str, canvas: Tuple[int, int], steps: Sequence[_GeomStep], /
) -> Tuple[bytes, Tuple[int, int]]:
    """float64 boxes (N, 4) in format "XYXY", "XYWH" or "CXCYWH" on a canvas
    (height, width), mapped through the steps as torchvision.transforms.v2
    maps tv_tensors.BoundingBoxes (clamped where it clamps): the boxes'
    bytes and the final canvas."""

def keypoints_map(
    points: Buffer, canvas: Tuple[int, int], steps: Sequence[_GeomStep], /
) -> Tuple[bytes, Tuple[int, int]]:
    """float64 keypoints (N, 2) mapped through the steps as torchvision
    maps tv_tensors.KeyPoints (never clamped)."""

def plan_boxes(
    spec: _TransformSpec,
    width: int,
    height: int,
    seed: int,
    epoch: int,
    index: int,
    view: int,
    boxes: Buffer,
    format: str,
    /,
    plan: Optional[Buffer] = None,
    *,
    whole: bool = False,
    single: bool = False,
) -> Tuple[bytes, Tuple[int, int]]:
    """float64 boxes (N, 4) in format "XYXY", "XYWH" or "CXCYWH" on a
    width x height image, mapped through the geometry of the plan
    ``plan(spec, width, height, seed, epoch, index, view)`` gives its
    pixels: the boxes' bytes and the output canvas (height, width). A
    RandomIoUCrop draws from ``plan`` (the sample's XYXY boxes; None: these
    boxes) and zeroes the boxes whose centre its crop leaves out.
    ``whole``: the boxes are of an integer dtype (torchvision's int64
    boxes), each resize's and affine's float32 result truncated as its
    .to(dtype); ``single``: float32 boxes, rounded to float32 after every
    step as torchvision's tensor is (an edge lands on the side it does
    there). The warps of the spec's augment chain (RandomAffine,
    RandomRotation, in groups too) follow the plan's steps."""

def plan_keypoints(
    spec: _TransformSpec,
    width: int,
    height: int,
    seed: int,
    epoch: int,
    index: int,
    view: int,
    points: Buffer,
    /,
    plan: Optional[Buffer] = None,
    *,
    single: bool = False,
) -> Tuple[bytes, Tuple[int, int]]:
    """float64 keypoints (N, 2) mapped as plan_boxes maps boxes (never
    clamped); single: rounded to float32 after every step."""

def plan_maps(
    spec: _TransformSpec,
    width: int,
    height: int,
    seed: int,
    epoch: int,
    index: int,
    view: int = 0,
    plan: Optional[Buffer] = None,
    *,
    pil: bool = False,
) -> Tuple[bytes, bytes]:
    """The index maps of the geometry plan_boxes maps through (``plan``:
    the sample's XYXY boxes a RandomIoUCrop's draw reads): (row_map,
    col_map), int32 bytes of the output canvas' height and width, each the
    input row or column that output pixel comes from (-1: padding, the
    fill). mask[row_map][:, col_map] is torchvision's v2 functional ops on
    a tv_tensors.Mask with the plan's parameters (nearest resize as torch
    picks it, crops, padding in the window's mode, flips): what
    mask_from_polygons, mask_from_rle and mask_from_png take. ``pil``: a
    resize takes the pixel Pillow's NEAREST takes instead (a mask resized
    while a PIL image, as the segmentation reference's own transforms
    do)."""

def plan_warp_masks(
    spec: _TransformSpec,
    seed: int,
    epoch: int,
    index: int,
    view: int,
    masks: Buffer,
    count: int,
    fill: int,
    *,
    size: Optional[Tuple[int, int]] = None,
) -> bytes:
    """``count`` uint8 masks of the output size (a flat C-contiguous
    array, each sampled through plan_maps; ``size`` (h, w): the spec's, or
    a varying spec's sample's own, required there) warped by the affine and
    rotation ops of that view of that sample's augment chain, drawn as its
    pixels drew them, as torchvision warps a tv_tensors.Mask (nearest,
    ``fill`` outside): the same bytes where the chain warps nothing.
    plan_boxes and plan_keypoints follow the same warps after the plan's
    steps; an op that moves pixels the targets cannot follow (a policy) is
    a ValueError naming it."""

def boxes_convert(boxes: Buffer, old_format: str, new_format: str, /) -> bytes:
    """convert_bounding_box_format on float64 boxes (N, 4)."""

def boxes_clamp(boxes: Buffer, format: str, canvas: Tuple[int, int], /) -> bytes:
    """clamp_bounding_boxes on float64 boxes (N, 4)."""

def keypoints_clamp(points: Buffer, canvas: Tuple[int, int], /) -> bytes:
    """clamp_keypoints on float64 keypoints (N, 2)."""

def boxes_iou_crop(
    boxes: Buffer,
    format: str,
    canvas: Tuple[int, int],
    top: int,
    left: int,
    height: int,
    width: int,
    /,
) -> Tuple[Tuple[bytes, Tuple[int, int]], bytes]:
    """RandomIoUCrop's crop of float64 boxes (N, 4): cropped and clamped,
    those whose centre lay outside the crop zeroed; and that mark, one
    byte a box."""

def boxes_sanitize(
    boxes: Buffer,
    format: str,
    canvas: Tuple[int, int],
    min_size: float = ...,
    min_area: float = ...,
    /,
) -> bytes:
    """SanitizeBoundingBoxes' keep mask, one byte (0 or 1) a box."""

# The detection ops' random parameters (csrc/targets/draws.h, bound in
# csrc/python/draws.c): canvas is the image's (height, width); each draws
# from the start of the plan stream of (seed, epoch, index, view); the
# options are torchvision's keywords with its defaults.

def detect_draw_iou_crop(
    canvas: Tuple[int, int],
    boxes: Sequence[Sequence[float]],
    seed: int,
    epoch: int,
    index: int,
    view: int = ...,
    min_scale: float = ...,
    max_scale: float = ...,
    min_aspect_ratio: float = ...,
    max_aspect_ratio: float = ...,
    sampler_options: Optional[Sequence[float]] = ...,
    trials: int = ...,
) -> Dict[str, Any]:
    """RandomIoUCrop's draw on XYXY boxes: {"crop": (top, left, height,
    width) or None, "option", "rounds", "limited"}."""

def detect_draw_zoom_out(
    canvas: Tuple[int, int],
    seed: int,
    epoch: int,
    index: int,
    view: int = ...,
    side_range: Sequence[float] = ...,
    p: float = ...,
) -> Dict[str, Any]:
    """RandomZoomOut's draw: {"applied", "ratio", "canvas": (h, w),
    "padding": [left, top, right, bottom]} (None when not applied)."""

def detect_draw_scale_jitter(
    canvas: Tuple[int, int],
    seed: int,
    epoch: int,
    index: int,
    view: int = ...,
    *,
    target_size: Tuple[int, int],
    scale_range: Sequence[float] = ...,
) -> Dict[str, Any]:
    """ScaleJitter's draw: {"scale", "size": (height, width)}."""

def detect_draw_shortest_size(
    canvas: Tuple[int, int],
    seed: int,
    epoch: int,
    index: int,
    view: int = ...,
    *,
    min_size: Union[int, Sequence[int]],
    max_size: Optional[int] = ...,
) -> Dict[str, Any]:
    """RandomShortestSize's draw: {"min_size", "size": (height, width)}."""

def detect_draw_fixed_size_crop(
    canvas: Tuple[int, int],
    seed: int,
    epoch: int,
    index: int,
    view: int = ...,
    *,
    size: Tuple[int, int],
) -> Dict[str, Any]:
    """The detection references' FixedSizeCrop draw: {"crop": (top, left,
    height, width) or None, "padding": [0, 0, right, bottom]}."""

def detect_draw_photometric(
    canvas: Tuple[int, int],
    seed: int,
    epoch: int,
    index: int,
    view: int = ...,
    brightness: Sequence[float] = ...,
    contrast: Sequence[float] = ...,
    saturation: Sequence[float] = ...,
    hue: Sequence[float] = ...,
    p: float = ...,
    channels: int = ...,
) -> Dict[str, Any]:
    """RandomPhotometricDistort's draw: its make_params' keys
    (brightness_factor, contrast_factor, saturation_factor, hue_factor,
    contrast_before, channel_permutation)."""

def resample_simd(cap: Optional[str] = ..., /) -> str:
    """The resampler's SIMD level, "c", "sse2" or "avx2", after first lowering
    it to at most cap when given (process-wide: call it with no loader
    running)."""

def http_sigv4() -> bool:
    """Whether the HTTP source's libcurl signs requests with AWS SigV4
    (CURLOPT_AWS_SIGV4: libcurl 7.75 or later)."""

def mask_from_polygons(
    polygons: Sequence[Sequence[float]],
    height: int,
    width: int,
    row_map: Buffer,
    col_map: Buffer,
    fill: int = 0,
) -> bytes:
    """A COCO polygon segmentation (a list of [x0, y0, x1, y1, ...], OR'd)
    rasterized exactly as pycocotools does on a height x width image, taken
    at rows row_map and columns col_map (1-d int32 arrays; -1: fill):
    len(row_map) * len(col_map) bytes, row-major, 0/1 or fill. ValueError
    for a polygon of fewer than 3 points, a coordinate not finite or beyond
    1048576 px, a map entry outside the image."""

def mask_from_rle(
    rle: Dict[str, Any],
    height: int,
    width: int,
    row_map: Buffer,
    col_map: Buffer,
    fill: int = 0,
) -> bytes:
    """A COCO RLE {"size": [h, w], "counts": ...} (counts a str or bytes,
    compressed, or a list of ints) decoded and sampled as
    mask_from_polygons does. ValueError for a size other than (height,
    width), a malformed string, counts that do not sum to height * width."""

def mask_from_png(
    data: Buffer, row_map: Buffer, col_map: Buffer, fill: int = 255
) -> bytes:
    """A segmentation PNG's stored values (a palette image's indices, 1/2/4/8
    bits, or 8-bit grey) taken at rows row_map and columns col_map (int32,
    -1: fill), row-major, never expanded to RGB. ValueError naming what is
    wrong for a damaged file, another colour type or depth, a map entry
    outside the image."""

def png_mask_size(data: Buffer, /) -> Tuple[int, int]:
    """(height, width) of a PNG that mask_from_png accepts; ValueError
    otherwise."""

def resample_simd_env() -> Tuple[Optional[str], Optional[str]]:
    """(value, cap): RINGLOADER_SIMD as the C core read it (None: unset) and
    the level it caps at (None where it names none: unset, empty or not a
    level's name, and then nothing is capped)."""

def object_ids(blob: Buffer, offsets: Buffer, /) -> Optional[bytes]:
    """None when the strings of (blob, offsets) are all different; else one
    int64 a string (bytes): the id of its first occurrence among the
    distinct strings, numbered in the order they first come."""

def http_library() -> str:
    """The HTTP source's libcurl with its TLS and HTTP/2 libraries, e.g.
    'libcurl/7.88.1 OpenSSL/3.0.20 nghttp2/1.52.0'."""

def io_probe() -> Tuple[bool, str]:
    """(io_uring_available, reason_if_not)."""

def cuda_probe() -> Tuple[bool, str, str, int]:
    """(available, message, library, device_count); library is the loaded
    runtime's path, or "" when none was loaded."""

# test builds: device memory and streams without torch (fake runtime tests)
def cuda_malloc(device: int, size: int, /) -> DeviceBuffer: ...
def cuda_stream_create(device: int, /) -> int:
    """A raw CUDA stream handle; it is never destroyed."""

def cuda_stream_sync(device: int, stream: int, /) -> None: ...

@final
class DeviceBuffer:
    """Device memory from cudaMalloc, freed with the object. Not instantiable:
    made by cuda_malloc(). Its buffer is only readable where device memory
    is host memory (the fake runtime)."""

    @property
    def ptr(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class Batch:
    """A batch, exported without copying. Not instantiable: made by
    Pipeline.next(). On the host it is a batch slot: each export (DLPack
    capsule or buffer) holds its own reference on the slot, so an exported
    tensor stays valid after the Batch and the Pipeline are gone. With a
    device it is the device buffer the allocator gave (owner), already
    ordered before the consumer stream given to next(); DLPack only."""

    @property
    def shape(self) -> Tuple[int, int, int, int]: ...
    @property
    def fallback(self) -> Tuple[int, ...]:
        """Positions of samples decoded by the fallback decoder (Pillow: not
        JPEG, PNG or WebP)."""

    @property
    def replaced(self) -> Tuple[Tuple[int, int, Union[DecodeError, OSError]], ...]:
        """(position, replacement id, exception) of samples that could not be
        read or decoded and were replaced by the next id of their part
        (Pipeline's parts) that loads (skip_errors=True; else empty): the
        exception is what next() would have raised for the sample, with
        .index set."""

    @property
    def ids(self) -> Tuple[int, ...]:
        """The id of the sample at each position: the ids the batch was
        submitted with, replacements put in."""

    @property
    def keys(self) -> Tuple[int, ...]:
        """The random key each position's sample was drawn with: the key
        submitted, or, for a sample replaced under skip_errors, the key its
        replacement was drawn with (its own)."""

    @property
    def fields(self) -> Optional[Tuple[bytes, ...]]:
        """With image_at: each position's bytes beside its image (those
        before it, then those after it); None without."""

    @property
    def ticket(self) -> int:
        """The number submit() returned for this batch."""

    @property
    def offset(self) -> int:
        """Where this view's region starts in the slot or device buffer, in
        bytes (0 for view 0)."""

    @property
    def views(self) -> Tuple["Batch", ...]:
        """The Batch of each view of the samples, this one (view 0) first:
        each exports its own region (shape, dtype) of the slot or buffer.
        A one-view batch is ``(self,)``."""

    @property
    def samples(self) -> Optional[Tuple["Batch", ...]]:
        """A varying batch's samples (a transform with ``varying`` 1: each
        sample its own size): a Batch each, (C, h, w) or (h, w, C), at its
        own place in the slot; None for a batch of one size."""

    @property
    def owner(self) -> Any:
        """Device batches: the owner object the allocator returned; None on
        the host."""

    @property
    def device(self) -> int:
        """The CUDA device of a device batch; -1 on the host."""

    # stream, max_version, dl_device and copy are accepted and ignored.
    def __dlpack__(self, *args: Any, **kwargs: Any) -> CapsuleType: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    # bfloat16 batches export as uint16 ("H") through the buffer protocol;
    # device batches have no buffer (BufferError).
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

@final
class Pipeline:
    def __new__(
        cls,
        # One view: a spec, its output given by dtype, mul, add and layout
        # below. Several views of each sample (decoded once): a sequence of
        # (spec, dtype, mul, add, layout), one per view, each written to a
        # region of its own of the batch (Batch.views).
        transform: Union[
            _TransformSpec,
            Sequence[
                Tuple[
                    _TransformSpec,
                    str,
                    Optional[Tuple[float, float, float]],
                    Optional[Tuple[float, float, float]],
                    str,
                ]
            ],
        ],
        *,
        # The table of samples, given once, with nothing made a sample:
        # files (or byte ranges of them) as (blob, offsets, prefix), file i
        # being prefix + blob[offsets[i]:offsets[i + 1]] (a uint8 buffer of
        # fs-encoded names without NUL, the int64 buffer of count + 1
        # offsets, a str), both borrowed for the pipeline's life; or a
        # sequence of paths (packed into a blob, one item at a time)...
        paths: Optional[Union[Tuple[Buffer, Buffer, str], Sequence[_Path]]] = ...,
        # int64 buffers, one entry a sample, borrowed: sample i is its file
        # from offsets[i] for lengths[i] bytes (lengths[i] < 0: the whole
        # file); lengths alone: from offset 0.
        offsets: Optional[Buffer] = ...,
        lengths: Optional[Buffer] = ...,
        # ... or bytes in memory (names: what errors call them).
        buffers: Optional[Sequence[bytes]] = ...,
        names: Optional[Sequence[str]] = ...,
        num_threads: int = ...,
        layout: str = ...,  # "NCHW" or "NHWC"
        seed: int = ...,
        io: str = ...,  # "auto", "io_uring" or "pread"
        max_pixels: int = ...,
        max_scans: int = ...,
        max_file_bytes: int = ...,
        allow_truncated: bool = ...,
        dtype: str = ...,  # "uint8", "float32", "float16" or "bfloat16"
        # Float outputs hold v * mul[c] + add[c]; each a tuple of 3 floats.
        mul: Optional[Tuple[float, float, float]] = ...,
        add: Optional[Tuple[float, float, float]] = ...,
        device: int = ...,  # CUDA device of the device delivery; -1: host
        # device: nbytes -> (owner, device address) for each batch
        allocator: Optional[Callable[[int], Tuple[Any, int]]] = ...,
        # decodes what libjpeg cannot: (memoryview, max_pixels) -> (rgb,
        # width, height), with rgb None for an image over max_pixels (read
        # from its header, not decoded: refused as too_big); runs on the
        # decode threads with the GIL taken. An exception is a DecodeError
        # of the file; a result of another shape a TypeError naming the
        # callable (skipped like a DecodeError with skip_errors)
        fallback: Optional[
            Callable[[memoryview, int], Tuple[Optional[Buffer], int, int]]
        ] = ...,
        direct_io: bool = ...,  # O_DIRECT reads where the file system allows
        skip_errors: bool = ...,  # replace failed samples (Batch.replaced)
        max_consecutive_errors: int = ...,  # ... up to this many in a row
        # (1..MAX_CONSECUTIVE_ERRORS; each key below 2**KEY_ATTEMPT_SHIFT)
        # The samples' objects on HTTP(S) servers: {"names": the display
        # name of each object, a sequence of str or (blob, offsets, prefix)
        # as StringBlob keeps them, "urls": their fetch URLs, a sequence of
        # str or (blob, offsets, prefix) (presigned: one an object), or
        # {bucket: base} (made in C from the names: an http(s) name is its
        # URL, s3://bucket/key is base + the key percent-encoded),
        # "objects": an int64 buffer of each sample's object, or None when
        # object j is sample j (without the key, starts gives them, or
        # paths: each sample's object by display name), and options "retries",
        # "timeout" (s without a byte), "connect_timeout", "max_connections",
        # "verify", "ca_file", "cache_dir" and "cache_bytes" (a local cache
        # of the ranges fetched, in an existing folder), "block_bytes" (with
        # the cache: neighbouring members fetched in one GET up to this)}
        http: Optional[Dict[str, Any]] = ...,
        # A sample's bytes hold more than its image (a tar shard's sample
        # with its other members): (image_at, image_len, refusals, checks,
        # max_int_digits). The image is bytes image_at[i] .. image_at[i] +
        # image_len[i] of sample i's, the rest comes back in Batch.fields;
        # image_at[i] < 0 refuses sample i (a DecodeError of kind "field",
        # skippable) with refusals[-image_at[i] - 1]. checks: the members
        # checked on those bytes before the image is decoded
        # (core/fields.h), one tuple a field, (at, len, ext, extensions,
        # kinds), a bad one refusing the sample likewise; max_int_digits:
        # int()'s limit on digits (0: none).
        # image_at, image_len and each check's at, len (int64) and ext
        # (int8) are buffers of one entry a sample. The record form,
        # ((files, sizes, mtimes, tag), starts, refusals, checks,
        # max_int_digits), each check (column, extensions, kinds), reads
        # them from the shards' version-2 record files as each sample's
        # job runs (csrc/source/shard_records.h): nothing per sample.
        fields: Optional[tuple] = ...,
        # The table's parts (the datasets it was made of) for skip_errors:
        # an int64 array (buffer protocol), each part's first id, then the
        # table's length; a failed sample is replaced within its part.
        # None: one part, the whole table.
        parts: Optional[Buffer] = ...,
        # Shards: an int64 buffer of K + 1 entries, borrowed; paths (or the
        # http objects) are K shards, shard k holding samples starts[k] ..
        # starts[k + 1] - 1, the table starts[K] samples.
        starts: Optional[Buffer] = ...,
        # Shards (with starts: local paths, or http objects given by
        # starts) whose samples' ranges are in record files, instead of
        # offsets and lengths: (files, sizes, mtimes, tag), each shard's
        # record file, the int64 size and mtime_ns it must state (buffers,
        # borrowed), and the bytes its tag starts with
        # (csrc/source/shard_records.h); tag None: only each file's format,
        # record count and size are checked (remote shards, whose files
        # each state their own ETag). Each read looks its sample up; a
        # record file that disagrees fails that sample, naming it.
        records: Optional[
            tuple[Sequence[str], Optional[Buffer], Optional[Buffer], Optional[bytes]]
        ] = ...,
        # A varying transform's batch arena, in bytes (0: 64 MiB): samples
        # past it get a buffer each (core/pipeline.h's arena_bytes), on a
        # device copied into a spill buffer the allocator gives in next().
        arena_bytes: int = ...,
        # The samples' boxes a RandomIoUCrop draws from: (boxes (N, 4)
        # float64 XYXY, offsets int64, one a sample and one more).
        plan_boxes: Optional[Tuple[Buffer, Buffer]] = ...,
    ) -> Pipeline: ...
    def submit(
        self,
        ids: Union[Buffer, Sequence[int]],
        keys: Union[Buffer, Sequence[int]],
        epoch: int,
        /,
    ) -> int:
        """Queue a batch of the table's samples ids, each with the key of its
        randomness (int64 arrays, or lists); returns its ticket (1, 2, ... in submission order), which
        its Batch, or the exception of its failure, carries. With a device,
        the allocator is called for the batch's buffer."""

    def next(
        self, timeout: Optional[float] = ..., *, consumer_stream: int = ...
    ) -> Optional[Batch]:
        """The oldest batch, in order, or None when no batch is in flight.
        With a device, consumer_stream (a cudaStream_t handle) is made to
        wait for the batch's copy. Raises the first failed sample's
        DecodeError or OSError (with .index, and the failed batch's .batch:
        its ids, .ticket and .fallback), TimeoutError after timeout seconds,
        RuntimeError once closed (also by close() from another thread
        during the wait)."""

    def set_keys(
        self,
        region: Optional[str],
        access_key: str = ...,
        secret_key: str = ...,
        token: Optional[str] = None,
        /,
    ) -> None:
        """Sign the GETs of the S3 objects (display name s3://..., fetch
        URL without a query string) per request with SigV4 for
        ``region``, from now on; ``set_keys(None)`` stops. Raises
        ValueError for unusable values (not named: they are credentials),
        NotImplementedError when libcurl is older than 7.75."""

    def set_urls(
        self, urls: Union[Sequence[str], Tuple[Any, Any, str], Dict[str, str]], /
    ) -> None:
        """New fetch URLs of an HTTP source's objects, in any form
        http["urls"] takes (one an object: same order and count); requests
        already sent keep theirs. A close() from another thread meanwhile
        waits for it."""

    def cancel(self) -> None:
        """Drop every batch in flight (HTTP requests are abandoned)."""

    def close(self) -> None:
        """Stop and join every thread; idempotent."""

    def stats(self) -> Dict[str, Union[int, float]]:
        """The keys of STATS_FIELDS, in its order. Cumulative counters:
        samples, batches, bytes_read, errors,
        skipped, fallback_decodes, truncated, direct_refused, inflight,
        ready, slots (ints); read_seconds, decode_seconds, io_cpu_seconds
        (the I/O thread's CPU time in batch reads) (floats); for a remote
        source http_requests (attempts), http_retries, http_bytes (body
        bytes received) and http_cache_hits (samples read from the local
        cache), 0 for local ones; past_arena (varying samples placed past
        their batch's arena). Every
        sample that could not be loaded counts once in errors (replacement
        candidates included); skipped counts those replaced."""

    @property
    def io_backend(self) -> str:
        """'io_uring', 'pread', 'memory' or 'http'; raises RuntimeError
        once closed."""

    @property
    def io_reason(self) -> str:
        """Why io_uring is not used ("" when it is)."""

    @property
    def inflight(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def pinned_slots(self) -> int: ...
    @property
    def copy_stream(self) -> int:
        """With a device: the cudaStream_t handle of the pipeline's own copy
        stream (created non-blocking, destroyed at close; 0 once closed)."""
