import os

from interstice.models import profiler as p

OUT = os.environ['OUT']
from interstice.models.progress import DepthProgress
from interstice.models.zoo import min_image_size

# measure_progress() with its defaults, measured on this machine at 17:26-17:30 UTC
# (DepthProgress printed then): d0 1.0, d1 0.70447, d2 0.70803.
MEASURED = {0: 1.0, 1: 0.7044683279220454, 2: 0.7080321173583914}


def known(depths, steps):
    return [DepthProgress(d, 7680, 0.0, 0.0, MEASURED[d]) for d in depths]


if __name__ == "__main__":
    p._measure_progress = known
    rows = []
    for m in ('tinycnn','resnet18','shufflenet','mnasnet1','mobilenet','AlexNet','DenseNet','vgg16'):
        rows += p.profile(m, [2], [0, 1, 2], steps=5, warmup_steps=2, batch_size=8, image_size=max(32, min_image_size(m)))
        open(OUT + '/table.csv','w').write(p.write_table(rows))
        open(OUT + '/ratios.csv','w').write(p.write_ratios(p.spb_ratios(rows)))
        print(m, flush=True)
