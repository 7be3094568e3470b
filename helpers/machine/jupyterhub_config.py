"""JupyterHub's configuration for a workshop (`make hub`; helpers/machine/hub.py says how).

Everything comes from the ``COURSE_HUB_*`` variables that `make hub` sets from its own:
LEARNERS, RANKS_EACH, THREADS_EACH, GPUS, HUB_IP, HUB_PORT, HUB_PREFIX, LAB_ARGS,
HUB_SSL_CERT and HUB_SSL_KEY.
"""

import os
import pwd
import shlex
import sys
from pathlib import Path

from helpers.machine import hub

c = get_config()  # noqa: F821 (JupyterHub defines it when it reads this file)

env = os.environ
prefix = Path(env["COURSE_HUB_PREFIX"])
state = prefix / "state"
try:
    learners = {learner.name: learner for learner in hub.class_from(env)}
    certificate = hub.tls(env)
except hub.HubConfigError as e:
    sys.exit(f"make hub: {e}")
port = int(env.get("COURSE_HUB_PORT", "8000"))

# the hub's public port (the proxy), its own API and the proxy's API; only the public one may
# listen beyond this machine, and only where HUB_IP says so
c.JupyterHub.ip = env.get("COURSE_HUB_IP", "127.0.0.1")
c.JupyterHub.port = port
if certificate:  # HTTPS for the learners' browsers (the hub's own API stays on loopback)
    c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = certificate
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = port + 1
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{port + 2}"
c.ConfigurableHTTPProxy.command = [str(prefix / "proxy/node_modules/.bin/configurable-http-proxy")]
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "cookie_secret")
c.JupyterHub.pid_file = str(state / "jupyterhub.pid")

# local accounts and their own passwords (PAM), the class's alone
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = set(learners)
c.Authenticator.delete_invalid_users = True  # last workshop's class, no longer listed or gone
# logging out ends the learner's JupyterLab, and with it their kernels and clusters
c.JupyterHub.shutdown_on_logout = True

# each learner's JupyterLab: as their own account (JupyterHub's LocalProcessSpawner), at their
# copy of the course, with their share of the machine
venv = Path(sys.executable).parent
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [sys.executable, "-m", "helpers.machine.hub", "singleuser"]
c.Spawner.args = shlex.split(env.get("COURSE_HUB_LAB_ARGS", ""))  # LAB_ARGS=: for every learner
c.Spawner.notebook_dir = f"~/{hub.HOME_FOLDER}"
c.Spawner.default_url = hub.DEFAULT_URL
c.Spawner.start_timeout = 120  # a loaded machine starts a JupyterLab slowly
c.Spawner.http_timeout = 120


def _share(key):
    return lambda spawner: learners[spawner.user.name].environment()[key]


def _home(spawner):
    return pwd.getpwnam(spawner.user.name).pw_dir


c.Spawner.environment = {
    "PATH": f"{venv}:/usr/local/bin:/usr/bin:/bin",
    # torch.compile's cache in the learner's home, not /tmp/torchinductor_<name>, where another
    # account could make that folder first and fill it (torch/_inductor/runtime/cache_dir_utils.py)
    "TORCHINDUCTOR_CACHE_DIR": lambda spawner: f"{_home(spawner)}/.cache/torchinductor",
    "COURSE_HUB_COURSE": str(prefix / "course"),
    **{key: _share(key) for key in ("COURSE_WORLD_SIZE", "COURSE_THREADS",
                                     "CUDA_VISIBLE_DEVICES")},
}
