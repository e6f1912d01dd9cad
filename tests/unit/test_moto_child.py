"""What MotoServer's child changes in moto to serve faster gives moto's answers unchanged."""

from __future__ import annotations

import re

from kinesis_core.local._moto_child import REQUEST_ID_IN_XML, RequestIdOnlyInXml

shim = RequestIdOnlyInXml()


def test_a_body_without_the_tag_is_returned_as_it_is() -> None:
    body = '{"Records": [{"Data": "' + "A" * 40_000 + '"}], "MillisBehindLatest": 0}'
    assert shim.sub(REQUEST_ID_IN_XML, "req-1", body) is body
    assert re.sub(REQUEST_ID_IN_XML, "req-1", body) == body


def test_an_xml_body_gets_its_request_id_as_from_re() -> None:
    body = "<R><ResponseMetadata><RequestId>old</RequestId></ResponseMetadata></R>"
    expected = re.sub(REQUEST_ID_IN_XML, "req-1", body)
    assert shim.sub(REQUEST_ID_IN_XML, "req-1", body) == expected
    assert "<RequestId>req-1</RequestId>" in expected


def test_everything_else_is_res() -> None:
    assert shim.sub(r"a+", "b", "caaat") == "cbt"
    assert shim.compile is re.compile
    assert shim.IGNORECASE is re.IGNORECASE
