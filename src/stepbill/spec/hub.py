"""A Hugging Face Hub id (`org/name`) as a MODEL argument: its config.json only, through huggingface_hub.

`hf_hub_download(repo_id, "config.json")` honours the Hugging Face cache (HF_HUB_CACHE / HF_HOME), offline mode
(HF_HUB_OFFLINE=1: the cache only) and the token for gated or private repos (HF_TOKEN or `hf auth login`).
Weights are never downloaded. huggingface_hub is the optional `hub` extra; every failure is one StepbillError line.

Unreachable Hub: huggingface_hub retries a failed connection with back-off (about 25 s before it gives up), so
without a proxy the endpoint is first tried with one TCP connection (REACH_TIMEOUT_S); when that fails the cache
alone is read (as under HF_HUB_OFFLINE=1) and a cold cache is one error line within seconds. With a proxy set
(HTTPS_PROXY, ALL_PROXY) the direct check would say nothing, so huggingface_hub is left to its own retries.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

from stepbill.errors import StepbillError

# owner/name as the Hub spells them: letters, digits, "-", "_", "." (no leading "." or "-"), exactly one "/"
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def looks_like_hub_id(model: str) -> bool:
    """True for `org/name` (one slash, Hub characters, not ending in .json)."""
    return HUB_ID.fullmatch(model) is not None and not model.endswith(".json")


REACH_TIMEOUT_S = 3.0  # one TCP connection to the Hub's endpoint: how long an offline machine waits
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def hub_reachable(endpoint: str, timeout_s: float = REACH_TIMEOUT_S) -> bool:
    """Whether a TCP connection to `endpoint` (a URL: https://huggingface.co) opens within `timeout_s`; True when a
    proxy is configured (the direct connection would not tell)."""
    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return True
    url = urlsplit(endpoint)
    if not url.hostname:
        return True  # not a URL this check understands: leave it to huggingface_hub
    try:
        with socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)), timeout_s):
            return True
    except OSError:
        return False


def download_config(repo_id: str) -> Path:
    """The local path of `repo_id`'s config.json (from the cache, or fetched once into it)."""
    try:
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub.utils import (
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            HFValidationError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise StepbillError(f"{repo_id!r} is not a preset or a local file; reading it as a Hugging Face Hub id "
                            "needs huggingface_hub: pip install 'stepbill[hub]'") from None
    where = f"Hub id {repo_id!r} (not a preset or a local file)"
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)  # its "Retrying in 4s" warnings would make the error more than one line
    offline = constants.is_offline_mode()
    cache_only = not offline and not hub_reachable(constants.ENDPOINT)  # as offline, without the retries
    try:
        return Path(hf_hub_download(repo_id, "config.json", local_files_only=cache_only))
    except LocalEntryNotFoundError:
        why = ("HF_HUB_OFFLINE is set" if offline else
               f"the Hub ({constants.ENDPOINT}) cannot be reached (HF_HUB_OFFLINE=1 skips the network)")
        raise StepbillError(f"{where}: its config.json is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) "
                            f"and {why}") from None
    except GatedRepoError:
        raise StepbillError(f"{where} is gated: accept its terms on huggingface.co, then set HF_TOKEN (or run "
                            "`hf auth login`)") from None
    except RepositoryNotFoundError:
        raise StepbillError(f"{where}: no such repository on the Hub, or it is private (set HF_TOKEN if you have "
                            "access)") from None
    except RevisionNotFoundError:
        raise StepbillError(f"{where}: the repository has no main revision") from None
    except EntryNotFoundError:
        raise StepbillError(f"{where}: the repository has no config.json") from None
    except HFValidationError:
        raise StepbillError(f"{where} is not a valid Hub repository id") from None
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        raise StepbillError(f"{where}: the Hub answered HTTP {status or 'error'} for its config.json") from None
    except OSError as exc:  # connection errors, a read-only cache, a full disk
        raise StepbillError(f"{where}: cannot fetch its config.json ({type(exc).__name__})") from None
    finally:
        hub_logger.setLevel(level)
