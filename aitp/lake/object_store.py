"""An object-store home checked before a command reads it: credentials, endpoint and bucket.

pyarrow reports a missing bucket as an empty listing (so `aitp lake check` said "lake ok" for a bucket
that does not exist), and its network and permission failures as multi-line OSErrors deep inside a
query. One HEAD of the bucket up front turns each of them into one line that names the fix.
"""

from __future__ import annotations

import os
from urllib.parse import parse_qs, urlsplit

import pyarrow.fs as pafs

from aitp.lake.errors import LakeError
from aitp.lake.storage import open_lake


class ObjectStoreError(LakeError):
    """An object-store home that cannot be read: no credentials, no answer, or no bucket."""


class MissingCredentialsError(ObjectStoreError):
    """No credentials were found for an `s3://` home."""


class RejectedCredentialsError(ObjectStoreError):
    """The object store refused the credentials it was given."""


class UnreachableStoreError(ObjectStoreError):
    """The object store's endpoint did not answer."""


class MissingBucketError(ObjectStoreError):
    """The bucket an object-store home names does not exist."""


NETWORK_MARKS = ("NETWORK_CONNECTION", "curlCode", "Could not connect", "Could not resolve", "Connection refused")
CREDENTIAL_MARKS = ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH", "HTTP status 403")
S3_CREDENTIALS_FIX = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"


def _s3_options(uri: str) -> dict[str, str]:
    """The URI's own options (`?endpoint_override=...&region=...`), as pyarrow reads them."""
    return {k: v[0] for k, v in parse_qs(urlsplit(uri).query).items()}


def s3_endpoint(uri: str) -> str | None:
    """The endpoint an `s3://` URI is sent to, as users configure it (URI option, environment); None: AWS's."""
    configured = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return _s3_options(uri).get("endpoint_override") or configured


def _anonymous(uri: str) -> bool:
    return _s3_options(uri).get("anonymous", "false").lower() == "true"


def _s3_probe(uri: str, bucket: str) -> pafs.S3FileSystem:
    """An S3 client that asks once: the loop's own client retries with backoff, slow to report a closed port."""
    options = _s3_options(uri)
    endpoint = s3_endpoint(uri)
    kwargs: dict[str, object] = {"anonymous": _anonymous(uri)}
    if endpoint is not None:
        scheme, _, host = endpoint.rpartition("://")
        kwargs.update(endpoint_override=host, scheme=options.get("scheme") or scheme or "https")
    region = options.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region is None and endpoint is None:
        region = pafs.resolve_s3_region(bucket)  # AWS answers only in the bucket's own region
    if region:
        kwargs["region"] = region
    retry = pafs.AwsStandardS3RetryStrategy(max_attempts=1)
    return pafs.S3FileSystem(retry_strategy=retry, connect_timeout=10, request_timeout=30, **kwargs)


def _has_s3_credentials() -> bool | None:
    """Whether the AWS credential chain finds any (None when botocore, part of the s3 extra, is absent)."""
    try:
        import botocore.session
    except ImportError:
        return None
    return botocore.session.get_session().get_credentials() is not None


def _bucket(uri: str, scheme: str) -> tuple[pafs.FileSystem, str]:
    """A filesystem to ask about the home's bucket, and the bucket; an OSError is the store's answer."""
    if scheme == "s3":
        bucket = urlsplit(uri).netloc
        return _s3_probe(uri, bucket), bucket
    lake = open_lake(uri)
    return lake.fs, lake.root.split("/", 1)[0]


def _explain(exc: OSError, uri: str, scheme: str, where: str) -> ObjectStoreError:
    text = " ".join(str(exc).split())  # pyarrow: "When ...: AWS Error X during Op operation: why; Details: ..."
    detail = text.rsplit(" operation: ", 1)[-1].split("; Details:", 1)[0]
    if any(mark in text for mark in NETWORK_MARKS):
        fix = "check AWS_ENDPOINT_URL and the network" if scheme == "s3" else "check the network"
        return UnreachableStoreError(f"cannot reach {where} for {uri} ({detail[:160]}): {fix}")
    if any(mark in text for mark in CREDENTIAL_MARKS):
        fix = S3_CREDENTIALS_FIX if scheme == "s3" else "check the store's credentials"
        return RejectedCredentialsError(f"{where} refused the credentials for {uri}: {fix}")
    return ObjectStoreError(f"cannot read {uri} ({detail[:200]}): check the URI and the store")


def check_object_store(uri: str) -> None:
    """Fail in one line when an object-store home cannot be read: credentials, endpoint, bucket."""
    scheme = uri.split("://", 1)[0].lower()
    if scheme in ("file", "memory"):
        return
    if scheme == "s3" and not _anonymous(uri) and _has_s3_credentials() is False:
        raise MissingCredentialsError(f"no credentials found for {uri}: {S3_CREDENTIALS_FIX}")
    where = (s3_endpoint(uri) or "AWS's S3 endpoint") if scheme == "s3" else f"the {scheme}:// store"
    try:
        fs, bucket = _bucket(uri, scheme)
        found = fs.get_file_info(bucket)
    except OSError as exc:
        raise _explain(exc, uri, scheme, where) from None
    if found.type == pafs.FileType.NotFound:
        raise MissingBucketError(
            f"bucket '{bucket}' of {uri} does not exist at {where}: create it or fix the bucket name in --home"
        )
