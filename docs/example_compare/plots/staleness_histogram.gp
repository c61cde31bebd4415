# Drawn by pstrain; redraw with: gnuplot staleness_histogram.gp (in this directory)
set terminal pngcairo size 900,540 font 'sans,10' noenhanced
set output 'staleness_histogram.png'
set title 'Staleness of applied gradients'
set xlabel 'staleness (versions)'
set ylabel 'fraction of applied gradients'
set grid
set key below reverse Left samplen 2 spacing 1.2 width 2
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set yrange [0:*]
set grid noxtics
plot 'staleness_histogram.dat' using 2:xticlabels(int($0) % 1 == 0 ? stringcolumn(1) : '') lc 1 title 'sync', \
     '' using 3 lc 2 title 'async', \
     '' using 4 lc 3 title 'ssp:2', \
     '' using 5 lc 4 title 'sync+backup:1'
