set -x
mkdir -p /tmp/shim/interstice
ln -sf $PWD/interstice/* /tmp/shim/interstice/
for d in optimizer replay api models agents; do ln -sfn $PWD/$d /tmp/shim/interstice/$d; done
export PYTHONPATH=/tmp/shim
REPO=$PWD
cd /tmp
timeout 80 python3 -c "
from interstice.models import profiler as p
print(p.write_table(p.profile('resnet18', [1], [0, 2], device='cuda', steps=10, batch_size=64, image_size=224, progress_steps=30)))" | tee $OUT/profile_cuda.csv
timeout 330 python3 -c "
from interstice.models import profiler as p
t, r = p.measure_ratios(('AlexNet','DenseNet','mnasnet1','mobilenet','resnet18','shufflenet','vgg16','tinycnn'), [2], [0, 1, 2], steps=3, batch_size=8, image_size=32)
open('$OUT/ratio_profile_cpu16.csv','w').write(t); open('$OUT/spb_ratios.csv','w').write(r); print(t); print(r)"
