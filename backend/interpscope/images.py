"""Images from a person (an upload, a --image file): checked before decoding, decoded safely, made model input.

Only PNG and JPEG are taken. The byte size is checked before anything is decoded, and the pixel count from the
file's header before its pixels are (a small file can declare a huge image: a decompression bomb); a file that is
not a readable PNG/JPEG gets one clear message. Decoding goes through Pillow; the image becomes the model's
channels (grey or RGB), is resized to the model's input size, and is scaled as its preprocessor says.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from interpscope.config import InterpscopeError

if TYPE_CHECKING:
    from interpscope.models.vision import Preprocessing

MAX_IMAGE_BYTES = 10 * 1024 * 1024
MAX_IMAGE_PIXELS = 4096 * 4096
FORMATS = {"PNG": "PNG", "JPEG": "JPEG"}
SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")


def check_image_size(size: int, name: str) -> None:
    """Refuse an image file over MAX_IMAGE_BYTES, before it is read or decoded."""
    if size > MAX_IMAGE_BYTES:
        raise InterpscopeError(f"{name} is {size / 2**20:.1f} MiB; an image may be at most "
                               f"{MAX_IMAGE_BYTES / 2**20:.0f} MiB.")
    if size == 0:
        raise InterpscopeError(f"{name} is empty.")


def decode_image(data: bytes, name: str = "image") -> np.ndarray:
    """A PNG or JPEG file's pixels as uint8 [H, W, 3] (RGB; grey images repeated over the channels, transparency
    laid over black), after the size checks."""
    check_image_size(len(data), name)
    if not data.startswith(SIGNATURES):
        raise InterpscopeError(f"{name} is not a PNG or JPEG image.")
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data), formats=list(FORMATS)) as opened:
            width, height = opened.size
            if width * height > MAX_IMAGE_PIXELS or width < 1 or height < 1:
                raise InterpscopeError(f"{name} is {width}x{height} pixels; an image may have at most "
                                       f"{MAX_IMAGE_PIXELS:,} pixels.")
            opened.load()
            picture: Image.Image = opened
            if opened.mode in ("RGBA", "LA", "P", "PA"):
                background = Image.new("RGBA", opened.size, (0, 0, 0, 255))
                picture = Image.alpha_composite(background, opened.convert("RGBA"))
            rgb = picture.convert("RGB")
    except InterpscopeError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError, SyntaxError) as err:
        raise InterpscopeError(f"{name} is not a readable PNG or JPEG image ({err}).") from None
    return np.asarray(rgb, dtype=np.uint8).copy()


def read_image_file(path: str | Path, flag: str = "--image") -> np.ndarray:
    """An image file's pixels (decode_image), with one-line errors for a missing, odd, huge or unreadable file."""
    file = Path(path).expanduser()
    if file.is_dir():
        raise InterpscopeError(f"{flag} {path} is a folder, not an image file.")
    if not file.exists():
        raise InterpscopeError(f"No such file: {path}")
    if not file.is_file():
        raise InterpscopeError(f"{flag} {path} is not a regular file.")
    check_image_size(file.stat().st_size, file.name)
    try:
        data = file.read_bytes()
    except OSError as err:
        raise InterpscopeError(f"Cannot read {flag} {path}: {err.strerror or err}.") from None
    return decode_image(data, file.name)


def model_pixels(image: np.ndarray, preprocessing: Preprocessing) -> torch.Tensor:
    """uint8 [H, W, 3] -> the model's input [1, C, h, w] (float32): grey or RGB as the model reads, resized
    (bilinear) to its input size, scaled to [0, 1], then normalised."""
    from PIL import Image

    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise InterpscopeError(f"An image must be uint8 [height, width, 3], not {image.dtype} {list(image.shape)}.")
    picture = Image.fromarray(image, mode="RGB")
    if preprocessing.channels == 1:
        picture = picture.convert("L")
    elif preprocessing.channels != 3:
        raise InterpscopeError(f"Models with {preprocessing.channels} input channels are not supported.")
    if picture.size != (preprocessing.width, preprocessing.height):
        picture = picture.resize((preprocessing.width, preprocessing.height), Image.Resampling.BILINEAR)
    array = np.asarray(picture, dtype=np.float32) / 255.0
    unit = torch.from_numpy(array[None] if array.ndim == 2 else array.transpose(2, 0, 1).copy())
    return preprocessing.to_input(unit)[None]


def model_view(image: np.ndarray, preprocessing: Preprocessing) -> np.ndarray:
    """What the model sees, as uint8 at its input size: [h, w] for grey models, [h, w, 3] for colour ones."""
    unit = preprocessing.to_unit(model_pixels(image, preprocessing)[0]).clamp(0, 1)
    view = (unit * 255).round().to(torch.uint8).numpy()
    return view[0] if view.shape[0] == 1 else view.transpose(1, 2, 0)
