# One image for the service and, built with the training extra, for the node agents.
#   Service (no torch; it never imports it):  docker build -t interstice .
#   Agent (torch, for the workers):           docker build -t interstice-agent --build-arg EXTRAS=train .
# torch from PyPI is a CUDA build of several GB; for a CPU-only agent image pass a package index
# that offers CPU wheels: --build-arg PIP_EXTRA_INDEX_URL=<that index>.
# Run the service alone:
#   docker run -p 8000:8000 -v interstice-db:/var/lib/interstice interstice
# or the whole demo (service + PostgreSQL + 2 agents training a job): docker compose up --build
FROM python:3.11-slim

ARG EXTRAS=""
ARG PIP_EXTRA_INDEX_URL=""
WORKDIR /src
COPY pyproject.toml README.md ./
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
