"""Rewards: answer matching and protocol parsing (framework-free) and the verl reward-loop managers.

Only ``verl_ext.reward.managers`` imports verl; importing it registers the managers.
"""
