"""TLS for enhanced fan-out: the CA bundle botocore would use, plus ALPN.

``ClientConfig.verify`` means what it means for every other client: True verifies against the
bundle botocore resolves (the profile's ``ca_bundle`` or ``AWS_CA_BUNDLE``, else
``REQUESTS_CA_BUNDLE``, else certifi's bundle), a string is a CA bundle path, False turns
verification off (with a warning, as for the other clients). ALPN offers ``h2`` and/or
``http/1.1``; AWS answers SubscribeToShard only over h2.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence

from kinesis_core.aws.config import ClientConfig, ca_bundle

LOG = logging.getLogger(__name__)


def ssl_context(config: ClientConfig, alpn: Sequence[str]) -> ssl.SSLContext:
    """A client context offering ``alpn``, verifying as ``config.verify`` says. Reads the CA
    bundle from disk: call it off the event loop."""
    if config.verify is False:
        LOG.warning(
            "TLS certificate verification is OFF for enhanced fan-out (%s): use this only "
            "against a local emulator",
            config.endpoint_url or "default endpoint",
        )
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=ca_bundle(config))
    context.set_alpn_protocols(list(alpn))
    return context
