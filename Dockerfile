# The allocation service (interstice serve). The training extra (torch) is left out: the service
# never imports it. Build: docker build -t interstice .
# Run:   docker run -p 8000:8000 -v /path/to/shared/data/bftrainer:/data:ro \
#          -e INTERSTICE_DATA_DIR=/data -v interstice-db:/var/lib/interstice interstice
FROM python:3.11-slim

WORKDIR /src
COPY pyproject.toml README.md ./
COPY interstice interstice
COPY optimizer optimizer
COPY replay replay
COPY api api
COPY models models
COPY agents agents
COPY elastic elastic
RUN pip install --no-cache-dir . && useradd --system --create-home interstice \
    && mkdir -p /var/lib/interstice && chown interstice /var/lib/interstice

USER interstice
WORKDIR /var/lib/interstice
EXPOSE 8000
HEALTHCHECK CMD python -c "import httpx; httpx.get('http://127.0.0.1:8000/healthz').raise_for_status()"
CMD ["interstice", "serve", "--host", "0.0.0.0", "--port", "8000"]
