"""--device is parsed once into a `Device`: the name (a str, recorded as before) and what it means."""
import argparse
import json

import pytest

from litert_gpu_toolkit.recipe import Device, add_device_argument, resolve_device, uses_cpu


def _parse(*argv):
    parser = argparse.ArgumentParser()
    add_device_argument(parser)
    return parser.parse_args(list(argv)).device


@pytest.mark.parametrize("name, phone, native, cpu, fp32", [
    ("host-gpu", False, False, False, False), ("host-gpu-fp32", False, False, False, True),
    ("cpu", False, False, True, False), ("host-native", False, True, False, False),
    ("host-native-fp32", False, True, False, True), ("host-native-cpu", False, True, True, False),
])
def test_the_parsed_value_says_what_the_device_is(name, phone, native, cpu, fp32):
    device = _parse("--device", name)
    assert isinstance(device, Device) and device == name and json.dumps(device) == json.dumps(name)
    assert (device.phone, device.native, device.cpu, device.fp32) == (phone, native, cpu, fp32)
    assert device.fixed_inputs_only == (phone or native)
    assert uses_cpu(name) == cpu                    # the string predicates agree with the value


def test_the_default_is_a_device_too():
    device = _parse()
    assert isinstance(device, Device) and device == "host-gpu" and not device.cpu


def test_an_unknown_name_is_refused_at_parsing(capsys):
    with pytest.raises(SystemExit) as exc:
        _parse("--device", "gpu0")
    assert exc.value.code == 2 and "unknown device 'gpu0'" in capsys.readouterr().err


def test_a_device_is_not_parsed_again():
    device = resolve_device("cpu")
    assert resolve_device(device) is device
