# One image for the service and, built with the training extra, for the node agents.
#   Service (no torch; it never imports it):  docker build -t interstice .
#   Agent (torch, for the workers):           docker build -t interstice-agent --build-arg EXTRAS=train .
# torch from PyPI is a CUDA build of several GB; for a CPU-only agent image pass a package index
# that offers CPU wheels: --build-arg PIP_EXTRA_INDEX_URL=<that index>.
# Run the service alone:
#   docker run -p 8000:8000 -v interstice-db:/var/lib/interstice interstice
# or the whole demo (service + PostgreSQL + 2 agents training a job): docker compose up --build
# Where no registry can be reached, build on a base made from Debian packages (Python 3.11 too):
#   containers/images.sh     (containers/base.sh, then podman build --network host \
#                             --build-arg BASE=localhost/interstice-base:bookworm -t interstice .)
# The package goes into a venv, /opt/interstice (on PATH): Debian's system Python is externally
# managed (PEP 668), and a venv works the same on python:3.11-slim.
ARG BASE=python:3.11-slim
FROM ${BASE}

ARG EXTRAS=""
ARG PIP_EXTRA_INDEX_URL=""
ENV PATH=/opt/interstice/bin:$PATH PYTHONUNBUFFERED=1
# unmunge checks the MUNGE credentials of multi-user mode (containers/base.sh's base has it).
RUN command -v unmunge >/dev/null || (apt-get update \
    && apt-get install -y --no-install-recommends munge && rm -rf /var/lib/apt/lists/*)
WORKDIR /src
COPY pyproject.toml ./
# The dependencies first, read from pyproject.toml, in a layer of their own: a change of the
# sources (README included) alone then reuses it (torch's several GB too): seconds, not minutes.
RUN python3 -m venv /opt/interstice \
    && python3 -c 'import sys, tomllib; project = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
extras = project["optional-dependencies"]; \
print(*project["dependencies"], *(d for e in sys.argv[1].split(",") if e for d in extras[e]), sep="\n")' \
        "$EXTRAS" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt && rm /tmp/requirements.txt
COPY README.md ./
COPY interstice interstice
COPY optimizer optimizer
COPY replay replay
COPY api api
COPY models models
COPY agents agents
COPY elastic elastic
COPY examples examples
RUN pip install --no-cache-dir ".${EXTRAS:+[$EXTRAS]}" \
    && useradd --system --create-home interstice \
    && mkdir -p /var/lib/interstice /jobs /tokens \
    && chown interstice /var/lib/interstice /jobs /tokens

USER interstice
WORKDIR /var/lib/interstice
EXPOSE 8000
HEALTHCHECK --interval=5s --timeout=3s CMD python -c "import httpx; httpx.get('http://127.0.0.1:8000/healthz').raise_for_status()"
CMD ["interstice", "serve", "--host", "0.0.0.0", "--port", "8000"]
