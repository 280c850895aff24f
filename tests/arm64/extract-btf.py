#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Writes the BTF of a Debian kernel package's image, raw, as /sys/kernel/btf/vmlinux has it:
extract-btf.py PACKAGE.deb OUT.btf

An arm64 image (boot/vmlinuz-*) is the kernel's flat Image, gzip-compressed on some releases,
with no ELF section table: the BTF blob the kernel carries (between __start_BTF and __stop_BTF)
is found by its header (magic 0xeB9F, version 1, a 24-byte header) and its length read from it.
The header's sections must lie inside the blob and its string section must end in NUL; exactly
one such blob must be there, or the script says what it found and fails."""
import gzip
import io
import lzma
import struct
import subprocess
import sys
import tarfile

HEADER = struct.Struct("<HBBIIIII")  # magic, version, flags, hdr_len, type_off, type_len, str_off, str_len
MAGIC = b"\x9f\xeb\x01\x00\x18\x00\x00\x00"  # 0xeB9F little-endian, version 1, flags 0, hdr_len 24


def image_of(deb):
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", deb], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            if m.name.startswith("./boot/vmlinuz-") or m.name.startswith("boot/vmlinuz-"):
                return m.name, tar.extractfile(m).read()
    sys.exit(f"{deb}: no boot/vmlinuz-* in the package")


def decompressed(img):
    if img[:2] == b"\x1f\x8b":
        return gzip.decompress(img)
    if img[:6] == b"\xfd7zXZ\x00":
        return lzma.decompress(img)
    return img


def blobs(img):
    at = img.find(MAGIC)
    while at != -1:
        _, _, _, hdr_len, type_off, type_len, str_off, str_len = HEADER.unpack_from(img, at)
        end = at + hdr_len + max(type_off + type_len, str_off + str_len)
        strings_end = at + hdr_len + str_off + str_len
        if (type_off == 0 and str_off == type_len and str_len > 0 and end <= len(img)
                and img[strings_end - 1] == 0):
            yield img[at:end]
        at = img.find(MAGIC, at + 1)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: extract-btf.py PACKAGE.deb OUT.btf")
    name, img = image_of(sys.argv[1])
    found = list(blobs(decompressed(img)))
    if len(found) != 1:
        sys.exit(f"{sys.argv[1]}: {name}: {len(found)} BTF blobs found, expected exactly one")
    with open(sys.argv[2], "wb") as f:
        f.write(found[0])
    print(f"{sys.argv[2]}: {len(found[0])} bytes of BTF from {name}")


if __name__ == "__main__":
    main()
