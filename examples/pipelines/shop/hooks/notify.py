# hook
#
# Tells a webhook about a step's event: POSTs the hook context (JSON, see
# docs/annotations.md, Hooks) to LINEAGE_NOTIFY_URL, signed like the webhook
# receiver expects it: `X-Lineage-Signature: sha256=<hex HMAC-SHA256 of the
# body>` with the secret LINEAGE_NOTIFY_SECRET. Without a URL it only logs the
# event and succeeds; a URL without a secret is refused (an unsigned alert
# could be forged). A non-2xx answer fails the hook, which Dagster retries.
import hashlib
import hmac
import json
import os
import sys
import urllib.request

context = json.loads(os.environ["LINEAGE_HOOK_CONTEXT"])
summary = f"{context['event']} of {context['step']} (run {context['run_id']})"
url = os.environ.get("LINEAGE_NOTIFY_URL", "")
if not url:
    print(f"notify: {summary}; LINEAGE_NOTIFY_URL is not set, nothing sent")
    sys.exit(0)
secret = os.environ.get("LINEAGE_NOTIFY_SECRET", "")
if not secret:
    sys.exit("notify: LINEAGE_NOTIFY_URL is set but LINEAGE_NOTIFY_SECRET is not: set the secret the receiver checks")
body = json.dumps({"text": summary, "context": context}, sort_keys=True).encode()
signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
request = urllib.request.Request(
    url, data=body, method="POST", headers={"Content-Type": "application/json", "X-Lineage-Signature": f"sha256={signature}"}
)
with urllib.request.urlopen(request, timeout=10) as answer:  # a non-2xx answer raises: the hook fails and is retried
    print(f"notify: {summary}; {url} answered {answer.status}")
