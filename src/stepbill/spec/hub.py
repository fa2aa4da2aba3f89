"""A Hugging Face Hub id (`org/name`) as a MODEL argument: its config.json only, through huggingface_hub.

`hf_hub_download(repo_id, "config.json")` honours the Hugging Face cache (HF_HUB_CACHE / HF_HOME), offline mode
(HF_HUB_OFFLINE=1: the cache only) and the token for gated or private repos (HF_TOKEN or `hf auth login`).
Weights are never downloaded. huggingface_hub is the optional `hub` extra; every failure is one StepbillError line.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from stepbill.errors import StepbillError

# owner/name as the Hub spells them: letters, digits, "-", "_", "." (no leading "." or "-"), exactly one "/"
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")


def looks_like_hub_id(model: str) -> bool:
    """True for `org/name` (one slash, Hub characters, not ending in .json)."""
    return HUB_ID.fullmatch(model) is not None and not model.endswith(".json")


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
    try:
        return Path(hf_hub_download(repo_id, "config.json"))
    except LocalEntryNotFoundError:
        why = ("HF_HUB_OFFLINE is set" if constants.is_offline_mode() else
               "the Hub cannot be reached (HF_HUB_OFFLINE=1 skips the network)")
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
