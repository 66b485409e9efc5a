"""What bench/report.py makes of bench/results/*.json: the documentation's Markdown tables
(pages.py, with one renderer per benchmark in collectives.py and training.py), the plots
(plots.py) and the README's headline table (headline.py)."""
