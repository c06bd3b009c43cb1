"""tb_read.py — a TensorBoard event file reader independent of mxu's writer,
for test_tensorboard: it checks every TFRecord's framing and both masked
CRC-32Cs (its own CRC, not the writer's), decodes each Event's protobuf
strictly (each scalar as Keras' TensorBoard callback writes it: a float32
tensor summary for the scalars plugin; the model as its write_graph does:
model.to_json() in a string tensor for the graph plugin's Keras view), and
prints one "tag step value" line per scalar, and "keras 0 N" for the model
(N: the layers its JSON lists).

Run with Debian's interpreter, standard library only:
  /usr/bin/python3 -I tests/tb_read.py FILE
Exit status 0 when the whole file checked out; otherwise 1, with the record
and what was wrong ("length CRC mismatch", "data CRC mismatch", ...) on
stderr."""
import json
import struct
import sys

FILE_VERSION = "brain.Event:2"


class BadFile(Exception):
    pass


# ---- CRC-32C (Castagnoli), reflected -------------------------------------

def _crc_table():
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


TABLE = _crc_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# The reader is only a check if its own CRC is right.
assert crc32c(b"123456789") == 0xE3069283


# ---- TFRecords -----------------------------------------------------------

def records(blob):
    """Yields (offset, data) for every record; BadFile on the first bad."""
    at = 0
    while at < len(blob):
        if len(blob) - at < 12:
            raise BadFile("offset %d: truncated record header" % at)
        head = blob[at:at + 8]
        (length,) = struct.unpack("<Q", head)
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if length_crc != masked_crc(head):
            raise BadFile("offset %d: length CRC mismatch" % at)
        end = at + 12 + length + 4
        if end > len(blob):
            raise BadFile("offset %d: truncated record of %d bytes"
                          % (at, length))
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[end - 4:end])
        if data_crc != masked_crc(data):
            raise BadFile("offset %d: data CRC mismatch" % at)
        yield at, data
        at = end


# ---- protobuf ------------------------------------------------------------

def varint(buf, at):
    value, shift = 0, 0
    while True:
        if at >= len(buf):
            raise BadFile("truncated varint")
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift >= 70:
            raise BadFile("varint longer than ten bytes")


def fields(buf):
    """(field number, wire type, value) for every field of a message."""
    out, at = [], 0
    while at < len(buf):
        key, at = varint(buf, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(buf, at)
        elif wire == 1:
            value, at = buf[at:at + 8], at + 8
        elif wire == 2:
            length, at = varint(buf, at)
            value, at = buf[at:at + length], at + length
        elif wire == 5:
            value, at = buf[at:at + 4], at + 4
        else:
            raise BadFile("wire type %d" % wire)
        if at > len(buf):
            raise BadFile("field %d runs past its message" % field)
        out.append((field, wire, value))
    return out


def int64(raw):
    if raw >= 1 << 64:
        raise BadFile("int64 varint over 64 bits")
    return raw - (1 << 64) if raw >= 1 << 63 else raw


def decode_metadata(buf):
    """SummaryMetadata must name the scalars plugin and the scalar class,
    or the graph plugin's Keras view (content "1"); returns the plugin."""
    plugin, content, data_class = None, b"", None
    for field, wire, raw in fields(buf):
        if (field, wire) == (1, 2):
            for f, w, v in fields(raw):
                if (f, w) == (1, 2):
                    plugin = v.decode("utf-8")
                elif (f, w) == (2, 2):
                    content = v
                else:
                    raise BadFile("PluginData: unexpected field %d" % f)
        elif (field, wire) == (4, 0):
            data_class = raw
        else:
            raise BadFile("SummaryMetadata: unexpected field %d" % field)
    if (plugin, content, data_class) == ("graph_keras_model", b"1", None):
        return plugin
    if plugin != "scalars" or data_class != 1:
        raise BadFile("metadata: plugin %r, data class %r, not scalars, 1"
                      % (plugin, data_class))
    return plugin


def decode_model(buf):
    """A string TensorProto of shape () holding model.to_json(): the
    number of layers its config lists."""
    dtype, shape, strings = None, None, []
    for field, wire, raw in fields(buf):
        if (field, wire) == (1, 0):
            dtype = raw
        elif (field, wire) == (2, 2):
            shape = raw
        elif (field, wire) == (8, 2):
            strings.append(raw)
        else:
            raise BadFile("TensorProto: unexpected field %d" % field)
    if dtype != 7 or shape != b"" or len(strings) != 1:
        raise BadFile("model tensor: dtype %r, shape %r, %d strings"
                      % (dtype, shape, len(strings)))
    return len(json.loads(strings[0].decode("utf-8"))["config"]["layers"])


def decode_tensor(buf):
    """A float32 TensorProto of shape (): its value."""
    dtype, shape, value = None, None, None
    for field, wire, raw in fields(buf):
        if (field, wire) == (1, 0):
            dtype = raw
        elif (field, wire) == (2, 2):
            shape = raw
        elif (field, wire) == (4, 2) and len(raw) == 4:
            (value,) = struct.unpack("<f", raw)
        elif (field, wire) == (5, 5):
            (value,) = struct.unpack("<f", raw)
        else:
            raise BadFile("TensorProto: unexpected field %d" % field)
    if dtype != 1 or shape != b"" or value is None:
        raise BadFile("tensor: dtype %r, shape %r: not a float32 scalar"
                      % (dtype, shape))
    return value


def decode_value(buf):
    """Summary.Value as tf.summary.scalar writes it: tag, metadata,
    tensor (a simple_value, TF1's form, is not what Keras writes)."""
    tag, value, plugin, tensor = None, None, None, None
    for field, wire, raw in fields(buf):
        if (field, wire) == (1, 2):
            tag = raw.decode("utf-8")
        elif (field, wire) == (9, 2):
            plugin = decode_metadata(raw)
        elif (field, wire) == (8, 2):
            tensor = raw
        else:
            raise BadFile("Summary.Value: unexpected field %d" % field)
    if tag is None or tensor is None or plugin is None:
        raise BadFile("Summary.Value without tag, metadata or tensor")
    if plugin == "scalars":
        value = decode_tensor(tensor)
    elif tag == "keras":
        value = decode_model(tensor)
    else:
        raise BadFile("a Keras model summary tagged %r, not 'keras'" % tag)
    return tag, value


def decode_event(buf):
    event = {"step": 0}
    for field, wire, raw in fields(buf):
        if (field, wire) == (1, 1):
            (event["wall_time"],) = struct.unpack("<d", raw)
        elif (field, wire) == (2, 0):
            event["step"] = int64(raw)
        elif (field, wire) == (3, 2):
            event["file_version"] = raw.decode("utf-8")
        elif (field, wire) == (5, 2):
            event["summary"] = [decode_value(value) for f, w, value
                                in fields(raw) if (f, w) == (1, 2)]
            if len(event["summary"]) != len(fields(raw)):
                raise BadFile("Summary: unexpected field")
        else:
            raise BadFile("Event: unexpected field %d wire %d"
                          % (field, wire))
    if not 1e9 < event.get("wall_time", 0) < 1e11:
        raise BadFile("Event: wall_time missing or implausible")
    if ("file_version" in event) == ("summary" in event):
        raise BadFile("Event: not exactly one of file_version, summary")
    return event


# ---- the file ------------------------------------------------------------

def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    lines, last_time = [], 0.0
    for index, (at, data) in enumerate(records(blob)):
        try:
            event = decode_event(data)
        except (BadFile, UnicodeDecodeError, struct.error) as e:
            raise BadFile("record %d at offset %d: %s" % (index, at, e))
        except (ValueError, KeyError) as e:  # the model's JSON
            raise BadFile("record %d: model JSON: %s" % (index, e))
        if (index == 0) != ("file_version" in event):
            raise BadFile("record %d: file_version must be the first record "
                          "and only it" % index)
        if index == 0 and event["file_version"] != FILE_VERSION:
            raise BadFile("file_version %r" % event["file_version"])
        if event["wall_time"] < last_time:
            raise BadFile("record %d: wall_time goes back" % index)
        last_time = event["wall_time"]
        for tag, value in event.get("summary", []):
            lines.append("%s %d %r" % (tag, event["step"], value))
    if not lines and not blob:
        raise BadFile("empty file")
    return lines


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tb_read.py FILE")
    try:
        lines = read(sys.argv[1])
    except BadFile as e:
        sys.stderr.write("tb_read: %s: %s\n" % (sys.argv[1], e))
        sys.exit(1)
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
