#!/bin/bash
# Session 41: bench:congestion fairness, the new build (/work/main) against 59ac0cb (/work/E), alternating, same seeds.
while ! grep -q ALLDONE /work/runs/s41/ab2/progress.txt 2>/dev/null; do sleep 10; done
O=/work/runs/s41/fair; mkdir -p $O
for seed in 41 42; do
  if [ $seed = 41 ]; then order="M E"; else order="E M"; fi
  for b in $order; do
    dir=/work/main; [ $b = E ] && dir=/work/E
    (cd $dir && node dist/bench/congestion/run.js --only fairness --fairness-runs 3 --seed $seed --out $O/fair-$b-$seed.json > $O/fair-$b-$seed.txt 2> $O/fair-$b-$seed.err)
    echo "$(date +%T) done $b $seed" >> $O/progress.txt
  done
done
echo ALLDONE >> $O/progress.txt
