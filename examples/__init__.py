"""The example jobs (``*.toml`` with their training scripts), the mixed jobs file and the
solver snapshots, shipped with the package: ``interstice demo`` submits these job files
from an installed package as from a checkout (a job file's ``workdir = ".."`` is then the
installed ``interstice`` folder, which holds ``examples/`` as the checkout's root does)."""
