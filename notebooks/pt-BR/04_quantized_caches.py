# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Caches quantizados: menos bits por token, e o que isso custa
#
# **Objetivo de aprendizagem.** Ativar um cache quantizado como o guia faz (`cache_implementation="quantized"` mais
# um dicionário `cache_config`, para os backends hqq, quanto e fp8), entender como um `QuantizedCache` divide sua
# memória entre dados empacotados em poucos bits e uma parte residual em precisão total, cronometrar cada passo de
# decodificação para ver se um flush aparece no tempo, medir o que cada backend e cada largura de bits faz com as
# previsões do modelo e saber por que o Gemma 3 é recusado.
#
# **Nas palavras do kvlab.** O `QuantizedCache` do transformers é, nas palavras da sua docstring, "semelhante" ao KIVI
# (Liu et al., arXiv:2402.02750): os `residual_length` tokens mais recentes ficam em precisão total, e tudo o que é
# mais antigo é empacotado com `nbits` por número, em grupos de `q_group_size`, com uma escala e um deslocamento
# (offset) por grupo (128 e 64 por padrão: os padrões de `QuantizedLayer.__init__`, `transformers/cache_utils.py`). O
# prompt é empacotado assim que é pré-preenchido; os tokens seguintes esperam na parte residual e, quando ela enche, é
# empacotada e anexada (um *flush*).
#
# Backends, com as larguras em bits que cada classe de camada desse arquivo aceita: **hqq** (`HQQQuantizedLayer`: 1, 2,
# 3, 4 ou 8 bits), **quanto** (`QuantoQuantizedLayer`: 2 ou 4 bits) e **fp8** (`Fp8QuantizedLayer`: cada token
# convertido de imediato para ponto flutuante de 8 bits, uma escala por tensor, sem grupos e sem parte residual). Na
# primeira chamada, o pré-preenchimento, `QuantizedLayer.update` e `Fp8QuantizedLayer.update` devolvem as chaves e os
# valores como chegaram, então o pré-preenchimento faz a atenção em precisão total; a cópia quantizada é o que todo
# passo *seguinte* lê.
#
# Tudo roda no SmolLM2-135M-Instruct (30 camadas, 3 cabeças KV × 64, float32) na CPU, com decodificação greedy.

# %%
import kvlab

kvlab.set_language("pt-BR")

# %%
# %matplotlib inline
import inspect
import os
import sys
import warnings

import ipywidgets as widgets
import torch
import transformers
from IPython.display import Markdown
from transformers import DynamicCache, GenerationConfig, masking_utils

import kvlab
from kvlab.caches.quantized import hqq_sequence_padding
from kvlab.i18n import number
from kvlab.live import live
from kvlab.measure import quality, step_times, text
from kvlab.measure.formula import kv_bytes_per_token
from kvlab.measure.timing import compare
from kvlab.plots import quantized
from kvlab.plots.step_times import plot_step_times
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*falling back to its reference PyTorch implementation.*")
warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # o transformers 5.24 escreve `cache=`
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
model, tokenizer = kvlab.load("smollm2")
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # encurta as execuções cronometradas na CI; as saídas verificadas valem de qualquer forma

# %% [markdown]
# ## 1. Cache quantizado
#
# O prompt do guia e, antes de tudo, o que o cache padrão (um `DynamicCache`) gera a partir dele, para termos com o
# que comparar.

# %%
# NBVAL_CHECK_OUTPUT
inputs = tokenizer("I like rock music because", return_tensors="pt")
print(inputs["input_ids"].shape[-1], "tokens do prompt")
out = model.generate(**inputs, do_sample=False, max_new_tokens=20)
print(tokenizer.batch_decode(out, skip_special_tokens=True)[0])

# %% [markdown]
# O guia recomenda `axis_key=1` e `axis_value=1` para o hqq. Com este prompt, o transformers puro falha:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
out = model.generate(
    **inputs,
    do_sample=False,
    max_new_tokens=20,
    cache_implementation="quantized",
    cache_config={"nbits": 4, "backend": "hqq", "axis_key": 1, "axis_value": 1},
)

# %% [markdown]
# Por quê: o prompt é empacotado logo após o pré-preenchimento. Suas chaves têm forma
# `(1 batch, 3 heads, 5 tokens, 64)` = 960 números, 15 grupos de 64. No eixo 1, o hqq organiza os grupos como linhas
# (`W.reshape([-1, group_size])` em `Quantizer.quantize`, `hqq/core/quantize.py`) e, com 4 bits, empacota duas linhas
# em cada linha de bytes, emparelhando a primeira metade das linhas com a segunda (`(W_q[:_step] << 4) | W_q[_step:]`
# com `_step = int(len(W_q) / 2)`, em `BitPack.pack_4bit_u8`, `hqq/core/bitpack.py`, hqq 0.2.8). 15 linhas se dividem
# em 7 e 8, e o emparelhamento falha: é esse o `7` contra `8` do erro. Qualquer prompt com número ímpar de grupos
# falha com 4 bits. O modelo do guia, Llama-2-7b-chat-hf, tem 32 cabeças de chave e valor de 128 números, 64 grupos
# por token, então seu número de grupos é sempre par (fonte: o `config.json` dele no Hugging Face Hub, `hidden_size`
# 4096 dividido por 32 cabeças de atenção, `num_key_value_heads` 32). As camadas hqq do kvlab completam a sequência
# com tokens zerados até que ela possa ser empacotada, e guardam o comprimento verdadeiro. Quantos tokens o kvlab
# acrescenta aqui:

# %%
# NBVAL_CHECK_OUTPUT
print("tokens de zeros que o kvlab acrescenta a um prompt de 5 tokens:",
      hqq_sequence_padding((1, 3, 5, 64), q_group_size=64, nbits=4, axis=1))
print("... e a um prompt de 6 tokens:", hqq_sequence_padding((1, 3, 6, 64), q_group_size=64, nbits=4, axis=1))

# %% [markdown]
# Para o quanto, o guia recomenda o eixo 0, que também é o padrão do transformers para os dois eixos (`axis_key=0`,
# `axis_value=0` em `QuantizedLayer.__init__`, `transformers/cache_utils.py`):

# %%
# NBVAL_CHECK_OUTPUT
out = model.generate(
    **inputs,
    do_sample=False,
    max_new_tokens=20,
    cache_implementation="quantized",
    cache_config={"nbits": 4, "backend": "quanto", "axis_key": 0, "axis_value": 0},
)
print(tokenizer.batch_decode(out, skip_special_tokens=True)[0])

# %% [markdown]
# O outro caminho do guia para o mesmo cache é um `GenerationConfig` que leva os dois campos, passado como
# `generation_config=`. O guia também diz que o quanto é o backend padrão: sem a chave `"backend"`, o `generate`
# escolhe o quanto (`cache_config.pop("backend", "quanto")` em `generation/utils.py`, fonte: transformers 5.25). A
# célula deixa a chave de fora e imprime a classe das camadas que o `generate` criou:

# %%
# NBVAL_CHECK_OUTPUT
generation_config = GenerationConfig(
    do_sample=False,
    max_new_tokens=20,
    cache_implementation="quantized",
    cache_config={"nbits": 4, "axis_key": 0, "axis_value": 0},  # sem "backend": o padrão do transformers
)
out = model.generate(**inputs, generation_config=generation_config, return_dict_in_generate=True)
print(tokenizer.batch_decode(out.sequences, skip_special_tokens=True)[0])
print("camadas criadas:", type(out.past_key_values.layers[0]).__name__)

# %% [markdown]
# O fp8 não precisa de nenhum pacote extra e recebe apenas o backend:

# %%
# NBVAL_CHECK_OUTPUT
out = model.generate(**inputs, do_sample=False, max_new_tokens=20, cache_implementation="quantized",
                     cache_config={"backend": "fp8"})
print(tokenizer.batch_decode(out, skip_special_tokens=True)[0])

# %% [markdown]
# O fp8 converte cada tensor inteiro (uma escala por tensor, não por grupo), então não tem uso para `nbits`, os
# eixos, `q_group_size` ou `residual_length`, e o transformers os recusa em vez de ignorá-los:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
model.generate(**inputs, do_sample=False, max_new_tokens=20, cache_implementation="quantized",
               cache_config={"backend": "fp8", "nbits": 4})

# %% [markdown]
# ## 2. As mesmas chamadas sob `kvlab.watch`
#
# As chamadas a `generate` do hqq, do quanto e do fp8 de novo, sem alterações, dentro de um único bloco `kvlab.watch`:
# um trace (registro) por cache.
#
# **Preveja primeiro.** Depois de 20 tokens novos, o cache guarda 24 tokens (o 20º token novo nunca é realimentado).
# Com o `residual_length=128` padrão, quantos deles o cache hqq de 4 bits guarda empacotados, e quantos esperam em
# precisão total?

# %%
guess_packed = None  # tokens empacotados: seu palpite
guess_residual = None  # tokens na parte residual em precisão total: seu palpite

# %%
CONFIGS_SHOWN = {
    "hqq 4 bits, eixo 1": {"nbits": 4, "backend": "hqq", "axis_key": 1, "axis_value": 1},
    "quanto 4 bits, eixo 0": {"nbits": 4, "backend": "quanto", "axis_key": 0, "axis_value": 0},
    "fp8": {"backend": "fp8"},
}
texts = {}
with kvlab.watch(model) as watch:
    for label, cache_config in CONFIGS_SHOWN.items():
        out = model.generate(**inputs, do_sample=False, max_new_tokens=20, cache_implementation="quantized",
                             cache_config=cache_config)
        texts[label] = tokenizer.batch_decode(out, skip_special_tokens=True)[0]
    out = model.generate(**inputs, do_sample=False, max_new_tokens=20)  # o DynamicCache padrão
    texts["DynamicCache"] = tokenizer.batch_decode(out, skip_special_tokens=True)[0]

# %%
# NBVAL_CHECK_OUTPUT
hqq_layer = watch.traces[0].final_layers()[0]  # "hqq 4-bit, axis 1", camada 0 (toda camada guarda os mesmos tokens)
display(score(guess_packed, hqq_layer["quantized_tokens"], unit=" tokens", kind="count"))
display(score(guess_residual, hqq_layer["residual_tokens"], unit=" tokens", kind="count"))

# %%
# NBVAL_CHECK_OUTPUT
print(len(watch.traces), "caches vistos")
print(f"{'cache':>22} {'tok empac.':>10} {'tok resid.':>12} {'B empac.':>9} {'B resid.':>10} {'B total':>9}")
for label, trace in zip(texts, watch.traces):
    layers = trace.final_layers()
    print(f"{label:>22} {layers[0]['quantized_tokens']:>10} {layers[0]['residual_tokens']:>12} "
          f"{number(sum(e['packed_bytes'] for e in layers)):>9} {number(sum(e['residual_bytes'] for e in layers)):>10} "
          f"{number(trace.summary()['final_bytes']):>9}")
print()
for label, generated in texts.items():
    print(f"{label:>22}: {generated}")

# %% [markdown]
# O hqq no eixo 1 roda sob o watch (o kvlab completa a sequência), e seu texto se afasta do texto do DynamicCache
# depois de "it's a way to connect with"; o texto do quanto é igual ao do DynamicCache, e os textos do quanto e do
# fp8 são os que as chamadas puras imprimiram acima. Os dois backends por grupo empacotam os 5 tokens do prompt e
# mantêm os 19 decodificados na parte residual em float32; assim, neste comprimento, seus caches são quase só parte
# residual e apenas cerca de um sexto menores que o DynamicCache (918.720 e 913.440 B contra 1.105.920 B). O fp8 não
# tem parte residual: todos os 24 tokens são armazenados com um byte por número, mais uma escala por tensor
# (276.720 B), um quarto do cache em float32 desde o primeiro token.

# %% [markdown]
# ## 3. Para onde vão os bytes quando a parte empacotada domina
#
# 24 tokens dizem pouco sobre compressão. Aqui cada backend roda sobre 280 tokens de inglês real (a prosa do manual
# de referência do Python, que vem junto com o Python): um pré-preenchimento de 256 tokens, empacotado de uma vez, e
# depois os 23 tokens seguintes alimentados ao modelo (teacher forcing), de modo que 24 previsões são avaliadas: a
# que vem logo após o pré-preenchimento e uma por token alimentado. No fim, o cache guarda 279 tokens: 256
# empacotados e 23 na parte residual. O hqq roda no eixo 1 do guia, o quanto no eixo 0 (o hqq também aceita 1 e 3
# bits: experimente-os no controle ao vivo abaixo).

# %% [markdown]
# Como roda: `kvlab.measure.quality.sweep(..., chunked=True)` constrói o `QuantizedCache` instrumentado do kvlab com as
# mesmas opções de cada `cache_config` e alimenta os 23 tokens em um único forward, em vez de 23 passos de
# decodificação. Ele prevê o mesmo: a atenção é causal, então cada um desses tokens lê o pré-preenchimento empacotado
# já desquantizado, como faria um passo de decodificação, e os tokens anteriores a ele em precisão total, como a parte
# residual os guardaria (23 tokens não chegam a encher a parte residual de 128 tokens, então nenhum flush acontece no
# meio do caminho; os testes do kvlab conferem isso contra a decodificação token a token).
#
# **Preveja primeiro.** Que porcentagem dos bytes do cache hqq de 4 bits corresponde à parte residual de 23 tokens em
# precisão total?

# %%
guess = None  # % dos bytes do cache inteiro: seu palpite

# %%
SWEEP = {
    "hqq 2 bits": {"backend": "hqq", "nbits": 2, "axis_key": 1, "axis_value": 1},
    "hqq 4 bits": {"backend": "hqq", "nbits": 4, "axis_key": 1, "axis_value": 1},
    "hqq 8 bits": {"backend": "hqq", "nbits": 8, "axis_key": 1, "axis_value": 1},
    "quanto 2 bits": {"backend": "quanto", "nbits": 2, "axis_key": 0, "axis_value": 0},
    "quanto 4 bits": {"backend": "quanto", "nbits": 4, "axis_key": 0, "axis_value": 0},
    "fp8": {"backend": "fp8"},
}
ids = text.prompt_ids(tokenizer, 280)  # (1, 280): pré-preenchimento de 256, depois 23 tokens fornecidos, 24 previsões avaliadas
print(f"Python {sys.version.split()[0]} (o texto vem do seu pydoc_data)")
rows, runs = quality.sweep(model, ids, prefill_tokens=256, configs=SWEEP, chunked=True, reference_label="DynamicCache")

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'configuração':>13} {'empacotado':>10} {'residual':>10} "
      f"{'total':>10} {'vs 16 bits':>9} {'empac. vs 16 bits':>17}")
for r in rows:
    print(f"{r['config']:>13} {number(r['packed_bytes']):>10} {number(r['residual_bytes']):>10} "
          f"{number(r['cache_bytes']):>10} {number(r['memory_ratio_16bit'], 3):>9} "
          f"{number(r['packed_ratio_16bit'], 3):>17}")
residual_tokens = ids.shape[-1] - 256 - 1  # os tokens fornecidos depois do pré-preenchimento (o último só é previsto)
per_token = kv_bytes_per_token(model.config, torch.float32)  # 30 camadas × chaves e valores × 3 cabeças × 64 × 4 B
print(f"parte residual: {residual_tokens} tokens × {number(per_token)} B = {number(residual_tokens * per_token)} B")
hqq4 = next(r for r in rows if r["config"] == "hqq 4 bits")
display(score(guess, round(100 * hqq4["residual_bytes"] / hqq4["cache_bytes"], 1), unit="%", kind="share"))

# %%
quantized.plot_configs({r["config"]: runs[r["config"]].trace for r in rows[1:]}, reference_bytes=rows[0]["cache_bytes"],
                       title="SmolLM2 com 279 tokens (256 empacotados): bytes "
                             "empacotados vs residuais em precisão total")

# %% [markdown]
# Toda configuração por grupo carrega a mesma parte residual: 23 tokens × 46.080 B (30 camadas × chaves e valores × 3
# cabeças × 64 números × 4 bytes) = 1.059.840 B. No cache hqq de 4 bits, isso é 36,5% dos seus 2.903.040 B, e o cache
# inteiro fica com 0,452 do tamanho de um cache de 16 bits com os mesmos tokens, longe dos 0,25 que 4 de 16 bits
# sugerem; com 2 bits, a parte residual é quase metade do cache (1.059.840 de 2.165.760 B). O DynamicCache aparece com
# 2,000 porque guarda float32, o dobro de um cache de 16 bits.

# %% [markdown]
# A parte empacotada sozinha (última coluna) é a razão de que se aproxima uma sequência muito mais longa que a parte
# residual. Ela custa nbits + 1 bits por número: cada grupo de 64 números acrescenta uma escala e um deslocamento em
# float32, 64 bits, ou seja, um por número (daí 3/16, 5/16 e 9/16: os 0,188, 0,312 e 0,562 da coluna). hqq e quanto
# empacotam nos mesmos bytes com a mesma largura de bits. O fp8 não tem parte residual: metade de um cache de 16 bits
# (mais uma escala por tensor), em qualquer comprimento.

# %% [markdown]
# ## 4. A parte residual ao longo do tempo (ao vivo)
#
# **Preveja primeiro.** quanto de 4 bits com `residual_length=8`, 32 tokens novos após o prompt do guia: imagine os
# bytes da parte residual em função dos tokens. Eles só crescem (uma "rampa") ou crescem e depois voltam a cair (uma
# "serra")? Responda com uma das duas palavras entre aspas.

# %%
guess = None  # uma das duas palavras entre aspas da pergunta: seu palpite

# %% [markdown]
# O controle abaixo executa a chamada do guia (`cache_implementation="quantized"` com o `cache_config` que você
# escolher) dentro de `kvlab.watch`, gerando 32 tokens novos após o prompt do guia, e compara seus tokens greedy com
# os do DynamicCache. O hqq roda no eixo 1 e o quanto no eixo 0, como o guia recomenda; o fp8 recebe apenas o
# backend. O quanto aceita 2 ou 4 bits, o hqq 1, 2, 3, 4 ou 8: outras escolhas mostram o próprio erro do
# transformers. Ele abre com as configurações da previsão: olhe a figura depois de dar o seu palpite.

# %%
LIVE_NEW_TOKENS = 32
prompt_length = inputs["input_ids"].shape[-1]
with kvlab.watch(model) as reference_watch:
    reference = model.generate(**inputs, do_sample=False, max_new_tokens=LIVE_NEW_TOKENS,
                               min_new_tokens=LIVE_NEW_TOKENS)
reference_tokens = reference[0, prompt_length:].tolist()


def quantized_split(backend, nbits, residual_length):
    if backend == "fp8":
        cache_config = {"backend": "fp8"}  # por tensor: recusa nbits, eixos, q_group_size e residual_length
    else:
        axis = 1 if backend == "hqq" else 0  # os eixos recomendados pelo guia
        cache_config = {"backend": backend, "nbits": nbits, "axis_key": axis, "axis_value": axis,
                        "residual_length": residual_length}
    with kvlab.watch(model) as watch:
        out = model.generate(**inputs, do_sample=False, max_new_tokens=LIVE_NEW_TOKENS, min_new_tokens=LIVE_NEW_TOKENS,
                             cache_implementation="quantized", cache_config=cache_config)
    same = quality.token_agreement(reference_tokens, out[0, prompt_length:].tolist())
    if backend == "fp8":
        return quantized.plot_split(watch.trace, reference_trace=reference_watch.trace,
                                    title=f"fp8\n{same['matches']}/{same['tokens']} tokens greedy iguais aos "
                                          f"do DynamicCache, os primeiros {same['common_prefix']} idênticos")
    return quantized.plot_split(watch.trace, reference_trace=reference_watch.trace,
                                title=f"{backend} {nbits} bits, "
                                      f"residual_length={residual_length}\n{same['matches']}/{same['tokens']} "
                                      "tokens greedy iguais aos do DynamicCache, os "
                                      f"primeiros {same['common_prefix']} idênticos")


live(quantized_split,
     backend=widgets.Dropdown(options=["hqq", "quanto", "fp8"], value="quanto", description="backend"),
     nbits=widgets.Dropdown(options=[1, 2, 3, 4, 8], value=4, description="nbits"),
     residual_length=widgets.IntSlider(value=8, min=8, max=64, step=8, continuous_update=False,
                                       description="residual_length"))

# %% [markdown]
# A mesma chamada em quatro configurações do controle, contada em vez de desenhada: quantas vezes os bytes residuais
# caem (um flush), o máximo que atingem e quantos tokens greedy coincidem com os do DynamicCache antes da primeira
# diferença.

# %%
# NBVAL_CHECK_OUTPUT
def residual_shape(cache_config, label):
    """The guide's call with `cache_config`, counted: how many times the residual bytes fall (a flush)."""
    with kvlab.watch(model) as watch:
        out = model.generate(**inputs, do_sample=False, max_new_tokens=LIVE_NEW_TOKENS, min_new_tokens=LIVE_NEW_TOKENS,
                             cache_implementation="quantized", cache_config=cache_config)
    residual = [row["residual_bytes"] for row in quantized.split_by_step(watch.trace)]
    falls = sum(after < before for before, after in zip(residual, residual[1:]))
    same = quality.token_agreement(reference_tokens, out[0, prompt_length:].tolist())
    print(f"{label:>31}: a parte residual cai {falls} vezes, no máximo {number(max(residual)):>7} B; os "
          f"primeiros {same['common_prefix']:>2} de {same['tokens']} tokens iguais aos do DynamicCache")
    return falls


quanto_4bit_falls = residual_shape({"backend": "quanto", "nbits": 4, "axis_key": 0, "axis_value": 0,
                                    "residual_length": 8}, label="quanto 4 bits, residual_length=8")
residual_shape({"backend": "fp8"}, label="fp8")
residual_shape({"backend": "hqq", "nbits": 2, "axis_key": 1, "axis_value": 1, "residual_length": 8},
               label="hqq 2 bits, residual_length=8")
residual_shape({"backend": "quanto", "nbits": 2, "axis_key": 0, "axis_value": 0, "residual_length": 8},
               label="quanto 2 bits, residual_length=8")
answers = dict(falls_label="serra", only_grows_label="rampa")  # as duas palavras da pergunta, no idioma do leitor
display(score(guess, answers["falls_label"] if quanto_4bit_falls else answers["only_grows_label"], kind="choice"))

# %% [markdown]
# Uma serra: a parte residual enche um token por passo e se esvazia na parte empacotada a cada flush, enquanto o
# DynamicCache (tracejado) sobe em linha reta. A parte residual nunca guarda mais de 7 tokens (322.560 B =
# 7 × 46.080 B): `QuantizedLayer.update` (`transformers/cache_utils.py`) empacota tudo assim que a parte residual mais
# o token novo chegariam a `residual_length`, então o 8º token vai direto para a parte empacotada. O fp8 não desenha
# serra: a sua parte residual nunca guarda um byte.

# %% [markdown]
# O que custa uma parte residual curta. Ela deixa o cache menor mais cedo, mas mais tokens são lidos de volta da sua
# cópia quantizada. E um flush reempacota o cache inteiro dentro da própria atualização de cache daquele passo, antes
# que a atenção possa ler as chaves: o mesmo `QuantizedLayer.update` desquantiza a parte empacotada, a concatena com a
# parte residual e o token novo e quantiza o resultado de novo, e a atenção lê o que ele devolve. Se essa espera é
# longa o bastante para aparecer, a seção 5 mede.

# %% [markdown]
# As contagens de tokens no fim de cada linha: com 2 bits, os dois backends se separam do texto greedy do DynamicCache
# depois de 3 tokens; o quanto de 4 bits depois de 29, e o fp8 depois de 5 (o texto dele já diferia na seção 1). Leve
# o controle a essas configurações para ver cada uma desenhada.

# %% [markdown]
# ## 5. O que um flush custa em tempo
#
# Os contadores de trabalho dizem onde olhar. Todo passo de decodificação de um cache por grupo (hqq, quanto)
# desquantiza toda a sua parte empacotada; um passo de flush também quantiza de novo o cache inteiro, todos os tokens
# até ali. O fp8 nunca faz flush e quantiza só o token novo a cada passo, mas a sua escala fica fixa depois do
# pré-preenchimento ("The per-tensor scale is frozen after the first `update`", diz a docstring de
# `Fp8QuantizedLayer`): ele guarda cada token em 8 bits, e `Fp8QuantizedLayer.update` converte o cache inteiro de
# volta para float32 a cada passo, para a atenção ler; assim ele desquantiza mais números que qualquer um dos dois
# caches por grupo. O DynamicCache não faz nem uma coisa nem outra. Então, se o custo está na quantização, os passos
# de flush de um cache por grupo são os seus passos lentos; se está na desquantização, o fp8 é o mais lento dos três.

# %% [markdown]
# As chamadas do guia de novo, cada uma gerando 19 tokens novos após um prompt de 6 tokens (um número par, então o
# hqq no eixo 1 empacota sem que o kvlab precise completar a sequência: 0 tokens zerados para um prompt de 6 tokens,
# como impresso na seção 1), com `residual_length=6`, para que aconteçam três flushes. Primeiro sob `kvlab.watch`,
# uma vez, para ter o trabalho exato de cada passo:

# %%
RESIDUAL, STEP_TOKENS = 6, 19
step_inputs = tokenizer("I like rock music because it", return_tensors="pt")
STEP_CONFIGS = {
    "DynamicCache": {},  # o cache padrão do generate
    "hqq 4 bits": {"cache_implementation": "quantized",
                  "cache_config": {"backend": "hqq", "nbits": 4, "axis_key": 1, "axis_value": 1,
                                   "residual_length": RESIDUAL}},
    "quanto 4 bits": {"cache_implementation": "quantized",
                     "cache_config": {"backend": "quanto", "nbits": 4, "axis_key": 0, "axis_value": 0,
                                      "residual_length": RESIDUAL}},
    "fp8": {"cache_implementation": "quantized", "cache_config": {"backend": "fp8"}},
}
with kvlab.watch(model) as step_watch:
    for label, generate_kwargs in STEP_CONFIGS.items():
        model.generate(**step_inputs, do_sample=False, max_new_tokens=STEP_TOKENS, min_new_tokens=STEP_TOKENS,
                       **generate_kwargs)
step_traces = dict(zip(STEP_CONFIGS, step_watch.traces))

# %%
# NBVAL_CHECK_OUTPUT
print(step_inputs["input_ids"].shape[-1], "tokens do prompt; passos 0 (o pré-preenchimento) a", STEP_TOKENS - 1)
print(f"cronograma de flush do transformers para residual_length={RESIDUAL}:", step_times.flush_schedule(RESIDUAL, STEP_TOKENS))
for label, trace in step_traces.items():
    print(f"{label:>13}: flush nos passos {step_times.flush_steps(trace)}, "
          f"quantização nos passos {step_times.quantize_steps(trace)}")
packing = [label for label in STEP_CONFIGS if label != "DynamicCache"]
work = {label: step_traces[label].work_by_step() for label in packing}
print("\npor passo, todas as camadas: chamadas de quantização e desquantização / números")
print(("     " + "  ".join(f"{label:^29}" for label in packing)).rstrip())
print("passo", end=" ")
for label in packing:  # um par de colunas por cache, dois espaços entre os pares
    print(f"{'quantiza':>15} {'desquantiza':>13}", end="\n" if label == packing[-1] else "  ")
for step in range(STEP_TOKENS):
    cells = []
    for label in packing:
        row = work[label][step]
        cells.append(f"{row['quantize_calls']:>3} / {number(row['quantized_elements']):>9} "
                     f"{row['dequantize_calls']:>3} / {number(row['dequantized_elements']):>7}")
    print(f"{step:>4} " + "  ".join(cells))
print("números desquantizados nos passos de decodificação de 1 a", STEP_TOKENS - 1, "(todas as camadas):",
      ", ".join(f"{label} {number(sum(work[label][s]['dequantized_elements'] for s in range(1, STEP_TOKENS)))}"
                for label in packing))

# %% [markdown]
# Depois, cronometradas, sem o watch: `kvlab.measure.step_times.decode_step_times` executa o `generate` de cada
# configuração com um `DecodeClock` como seu `streamer=` (uma marca de tempo por token novo; o tempo entre duas é um
# passo de decodificação), com as repetições intercaladas entre as configurações, cada uma com um cache próprio
# (`generate` cria um novo a cada chamada). Impressos: o tempo por token decodificado de cada configuração, sua razão
# em relação ao do DynamicCache e, para hqq e quanto, seus passos de flush comparados com os demais passos.

# %%
# Não verificado: os tempos dependem da máquina.
STEP_REPEATS = 1 if QUICK else 5
step_results = step_times.decode_step_times(model, step_inputs["input_ids"], STEP_CONFIGS, new_tokens=STEP_TOKENS,
                                            repeats=STEP_REPEATS, warmup=0 if QUICK else 1)
print("tempo por token decodificado (mediana das repetições, intervalo interquartil, IQR):")
for label, result in step_results.items():
    print(f"{label:>13}: {result.decode.describe()}")
verdicts = [compare(step_results["DynamicCache"].decode, result.decode, warn=False).verdict()
            for label, result in step_results.items() if label != "DynamicCache"]
for label in ("hqq 4 bits", "quanto 4 bits"):
    others, flushes = step_times.split_steps(step_results[label], step_times.flush_steps(step_traces[label]))
    verdicts.append(compare(others, flushes, warn=False).verdict())
print()
print("\n".join(verdicts))  # impresso aqui e de novo na caixa sob a figura

# %%
# Não verificado: os tempos dependem da máquina.
plot_step_times(step_results, step_traces, field="quantized_elements",
                title=f"SmolLM2, residual_length={RESIDUAL}: cada passo de decodificação, mediana de "
                      f"{STEP_REPEATS} repetições intercaladas (faixa: IQR), passos de flush circulados", verdicts=verdicts)

# %% [markdown]
# O que a tabela verificada diz. hqq e quanto quantizam no pré-preenchimento e depois apenas nos passos 6, 12 e 18,
# cada vez o cache inteiro (60 chamadas: chaves e valores de 30 camadas, todos os tokens até ali). O fp8 quantiza a
# cada passo, mas só o token novo (11.520 números), e desquantiza a cada passo o seu cache inteiro, token novo
# incluído: 80.640 números no passo 1, 276.480 no passo 18, 3.214.080 nos 18 passos de decodificação, contra
# 2.488.320 do hqq ou do quanto (a última linha da tabela). O painel da direita da figura desenha o trabalho de
# quantização por passo; a caixa sob a figura repete os vereditos impressos acima dela.

# %% [markdown]
# Comecemos pelo fp8, porque é nele que está a lição: ele desquantiza mais números que qualquer um dos caches por
# grupo, e o seu veredito contra o DynamicCache põe um preço nisso. "Nenhuma diferença além do ruído" significaria
# que converter o cache inteiro de volta para float32 a cada passo é desprezível perto de um forward pelas 30 camadas
# nesta CPU; logo, a quantidade de valores que um cache desquantiza não é o que o torna lento; "mais devagar" põe um
# preço nisso; "ruído demais para concluir" (repetições de menos) não diz nada, nem num sentido nem no outro.

# %% [markdown]
# O que o hqq e o quanto acrescentam é a forma como empacotam: a cada passo desempacotam números guardados em poucos
# bits e aplicam a escala e o deslocamento de cada grupo, e a cada flush quantizam de novo o cache inteiro. Ali o hqq
# também ajusta o deslocamento de cada grupo: o `HQQQuantizedLayer._quantize` do transformers chama o
# `Quantizer.quantize` do hqq sem `optimize`, cujo padrão é `True` (`hqq/core/quantize.py`), e o otimizador roda até
# `"iters": 20`, parando assim que o erro deixa de cair (`optimize_weights_proximal_legacy`, `hqq/core/optimize.py`).

# %% [markdown]
# Como ler os vereditos de flush. Se o empacotamento está no caminho crítico, os passos circulados ficam acima dos
# vizinhos nas linhas do hqq e do quanto, e os dois últimos vereditos dizem que os passos de flush são mais lentos que
# os demais, com um intervalo que exclui 1. Onde um ponto circulado fica dentro da faixa dos passos ao seu redor, ou o
# intervalo contém 1, esta execução não mostra o efeito para aquele backend. Os passos após um flush também
# desquantizam uma parte empacotada maior que os passos anteriores (as colunas de desquantização da tabela), um custo
# menor e constante que a linha pode mostrar ou não. Os três primeiros vereditos comparam a decodificação inteira com a
# do DynamicCache: neles entra a desquantização de todo passo, com flush ou não.

# %% [markdown]
# ## 6. O que a quantização faz com as previsões
#
# De volta à execução de 280 tokens da seção 3: em cada uma das 24 posições avaliadas, o próximo token greedy do
# cache quantizado coincide com o do DynamicCache alimentado com os mesmos tokens (*concordância top-1*)? Quanto a
# distribuição do próximo token se deslocou (*KL*, em nats)? Quão bem o modelo ainda prevê o texto real
# (*perplexidade*)?
#
# **Preveja primeiro.** Entre hqq com 2, 4 e 8 bits, quanto com 2 e 4 bits e fp8, qual configuração escolhe o mesmo
# próximo token que o DynamicCache no menor número das 24 posições?

# %%
guess = None  # um dos nomes de SWEEP, p. ex. "hqq 8-bit": seu palpite

# %%
# NBVAL_CHECK_OUTPUT
fewest = min(rows, key=lambda r: r["top1_agreement"])["config"]
display(score(guess, fewest, kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
positions = len(runs["DynamicCache"].targets)
for r in rows:
    print(f"{r['config']:>13}: concordância top-1 {round(r['top1_agreement'] * positions):>2}/{positions}")

# %%
# KL e perplexidade (não verificadas: somas de ponto flutuante sobre distribuições de 49.152 tokens).
print(f"{'configuração':>13} {'KL médio':>8} {'KL máx.':>7} {'perplexid.':>11}")
for r in rows:
    print(f"{r['config']:>13} {number(r['kl_mean'], 4):>8} {number(r['kl_max'], 3):>7} "
          f"{number(r['perplexity'], 2, grouping=False):>11}")

# %%
# Posição por posição (não verificado: ponto flutuante). Onde a escolha greedy de cada cache difere da
# do DynamicCache, e quanto ela moveu a log-probabilidade do próximo token real: a perplexidade é a
# do DynamicCache vezes exp(-movimento médio).
for label in ("hqq 4 bits", "hqq 8 bits", "quanto 4 bits", "fp8"):
    by_position = quality.per_position(runs["DynamicCache"], runs[label])
    moves = [p["target_shift"] for p in by_position]
    print(f"{label:>13}: escolhas diferentes nas posições {[p['position'] for p in by_position if not p['same']]}; "
          f"a log-probabilidade do próximo token real mudou de {number(min(moves), 3)} a {number(max(moves), 3)} "
          f"nats, média {number(sum(moves) / len(moves), 4)}")
print()
for p in quality.per_position(runs["DynamicCache"], runs["hqq 8 bits"]):
    if not p["same"]:
        first, second = (tokenizer.decode([token]) for token in p["reference_top2"])
        print(f"posição {p['position']}: os dois tokens mais prováveis do DynamicCache, {first!r} "
              f"e {second!r}, estão a {number(p['margin'], 4)} nats um do outro; o hqq de 8 bits "
              f"escolhe {tokenizer.decode([p['pick']])!r}, KL ali {number(p['kl'], 5)} nats")

# %% [markdown]
# O fp8 concorda nas 24 posições, o hqq de 8 bits em 23, o hqq de 4 bits e o quanto de 4 bits em 22 cada. A
# queda abrupta fica entre 4 e 2 bits: o quanto de 2 bits concorda em 10 posições e o hqq de 2 bits em 8, menos da
# metade. As medidas mais finas (impressas acima, não verificadas porque são somas em ponto flutuante) dizem o mesmo:
# o KL médio fica em torno de 0,01 nats com 4 bits, 0,0001 com 8 bits e 0,0028 com fp8, e acima de 1 nat com 2
# bits, onde a perplexidade do texto real também salta dos 15,25 do DynamicCache para cerca de 32 (hqq) e 51
# (quanto); com 4 bits ou mais, ela fica a menos de 0,1 dele.

# %% [markdown]
# Uma coisa chama a atenção no hqq de 8 bits nessas linhas: KL máximo de 0,000 (abaixo de meio milésimo de nat em
# todas as posições) e, mesmo assim, uma posição perdida. As linhas posição a posição explicam: a posição perdida é
# um quase empate. Ali os dois tokens mais prováveis do DynamicCache estão a 0,0111 nats um do outro, então uma
# mudança no cache pequena demais para aparecer no KL (0,00021 nats ali) inverte a escolha greedy; o hqq de 4 bits e
# o quanto de 4 bits invertem a mesma posição, o fp8 não. A concordância top-1 conta um quase empate invertido como
# um erro inteiro, e 24 posições são poucas (uma posição é 1/24 delas): leia 22 contra 23 como empate, e a queda com
# 2 bits como o verdadeiro resultado.

# %% [markdown]
# O hqq de 8 bits também tem a mesma perplexidade do hqq de 4 bits, uma coincidência da média: o hqq de 8 bits muda a
# log-probabilidade do próximo token real em no máximo alguns centésimos de nat, o hqq de 4 bits em vários décimos
# para um lado ou para o outro (as linhas acima mostram cada intervalo), e as mudanças se compensam numa média quase
# igual (-0,0033 e -0,0031 nats), que leva os 15,25 do DynamicCache a 15,30 nos dois casos.

# %% [markdown]
# A figura põe lado a lado a concordância de cada configuração (num eixo que começa em 0) e a memória da mesma
# execução: o cache inteiro com 279 tokens, parte residual incluída (a coluna "vs 16 bits" da seção 3), em relação
# a um cache de 16 bits com os mesmos tokens. A faixa embaixo dela marca só a parte empacotada (a coluna "empac. vs
# 16 bits" da seção 3), a razão de que se aproxima uma sequência muito mais longa. A faixa não tem eixo de
# concordância: com 279 tokens, os 23 tokens mais recentes ainda eram lidos em precisão total, uma sequência longa
# leria quase todos os seus tokens da cópia quantizada, e nenhuma concordância foi medida num comprimento assim. Só as
# medições do próprio kvlab estão nela.

# %%
quantized.plot_quality_vs_memory([r for r in rows if r["config"] != "DynamicCache"],
                                 title="SmolLM2, 256 tokens empacotados + 23 residuais: concordância top-1 vs memória")

# %% [markdown]
# ### Resultados publicados (externos, não medidos aqui)
#
# Eles vêm de outros modelos, outros benchmarks e outras medidas de qualidade e de memória, por isso ganham uma
# tabela própria em vez de um lugar nos eixos acima:

# %%
Markdown(quantized.references_markdown())

# %% [markdown]
# A tendência do blog da Hugging Face coincide com o que medimos (R1 e R2): 4 bits se sustentam, e é em 2 bits que a
# qualidade se perde. O KIVI mantém a qualidade em 2 bits, ao contrário desta execução (R3), e isso não é
# necessariamente uma contradição. O KIVI quantiza as chaves por canal e os valores por token (o resumo do artigo,
# arXiv:2402.02750), enquanto o transformers quantiza os dois por canal ("in contrast to what was described in the
# paper", diz a docstring do `QuantizedCache`), e o artigo mede modelos Llama-2, Falcon e Mistral nas tarefas do
# LM-Eval e no LongBench, de contexto longo; aqui temos um modelo de 135M com 3 cabeças KV, avaliado em 24 posições.

# %% [markdown]
# ## 7. Por que o Gemma 3 é recusado
#
# A tabela do guia diz que o cache quantizado não suporta camadas de janela deslizante. As camadas deslizantes do
# Gemma 3 descartam os tokens mais antigos que a sua janela; o que uma camada quantizada teria de fazer que o
# `QuantizedCache` não faz? Eis a chamada do guia no tiny-gemma3 (pesos aleatórios, com a mesma disposição de camadas
# deslizantes e completas do Gemma 3, em tamanho de brinquedo):

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
gemma = kvlab.tiny_model("tiny-gemma3")
print(gemma.config.layer_types)
source = torch.randint(3, 128, (1, 8), generator=torch.Generator().manual_seed(0))
gemma.generate(source, attention_mask=torch.ones_like(source), do_sample=False, max_new_tokens=4,
               cache_implementation="quantized", cache_config={"backend": "quanto", "nbits": 4})

# %% [markdown]
# O `QuantizedCache` do transformers só constrói camadas quantizadas de atenção completa: o seu `__init__`
# (`transformers/cache_utils.py`) levanta um erro para qualquer tipo de camada diferente de `full_attention`, o erro
# acima, e, caso contrário, constrói uma camada quantizada por camada oculta. Ele não tem nenhuma camada que descarte
# tokens e recusa antes de gerar qualquer coisa (`kvlab.make_cache("quantized", ...)` recusa da mesma forma).

# %% [markdown]
# O que um cache sem camadas que descartam tokens custaria a um modelo com janela deslizante: atenção errada ou
# memória? Os tokens a que uma camada deslizante presta atenção são decididos pela sua máscara, e o transformers
# constrói a máscara deslizante a partir da config, não do cache (a primeira linha impressa abaixo vem de
# `create_sliding_window_causal_mask`). Um `DynamicCache()` criado sem config tem a mesma falha que um quantizado (uma
# camada completa para cada camada, nenhuma descarta tokens), então ele mostra o que acontece:

# %%
# NBVAL_CHECK_OUTPUT
print("em create_sliding_window_causal_mask:",
      next(line.strip() for line in inspect.getsource(masking_utils.create_sliding_window_causal_mask).splitlines()
           if "sliding_window = " in line))
long_source = torch.randint(3, 128, (1, 16), generator=torch.Generator().manual_seed(0))  # (1, 16): além da janela
by_config = DynamicCache(config=gemma.config)  # uma camada deslizante para cada camada sliding_attention
full_only = DynamicCache()  # sem config: uma camada completa para cada camada, como um QuantizedCache teria
generated = {}
for name, cache in (("DynamicCache(config=...)", by_config), ("DynamicCache()", full_only)):
    generated[name] = gemma.generate(long_source, attention_mask=torch.ones_like(long_source), do_sample=False,
                                     max_new_tokens=6, past_key_values=cache)
    held = [layer.keys.shape[-2] for layer in cache.layers]  # chaves: (batch, kv_heads, tokens, head_dim)
    print(f"{name:>24}: tokens que cada camada guarda {held}")
print("sliding_window:", gemma.config.sliding_window)
if torch.equal(generated["DynamicCache(config=...)"], generated["DynamicCache()"]):
    print("os dois caches geraram os mesmos tokens")
else:
    print("os dois caches geraram tokens diferentes")

# %% [markdown]
# ## Principais conclusões
#
# - A opção do guia é `cache_implementation="quantized"` com um dict `cache_config`. O hqq no eixo 1
#   recomendado pode derrubar o transformers puro em prompts curtos de tamanho ímpar (o kvlab completa a sequência);
#   o fp8 aceita só `{"backend": "fp8"}` e recusa as opções por grupo.
# - Um cache quantizado é dado empacotado mais uma parte residual em precisão total. Com 24 tokens ele é quase todo
#   parte residual; com 279 tokens a parte residual de 23 tokens ainda passa de um terço dos bytes do cache de 4 bits;
#   só bem além de `residual_length` aparece a razão do empacotado (nbits + 1 bits por número aqui). O fp8 reduz à
#   metade um cache de 16 bits desde o primeiro token.
# - Tempo: um cache por grupo desquantiza a sua parte empacotada a cada passo de decodificação e reempacota o cache
#   inteiro a cada flush (a cada `residual_length`-ésimo passo), dentro do passo; o fp8 desquantiza o seu cache inteiro
#   a cada passo, mais números que qualquer um deles. Os vereditos da seção 5 dizem, com intervalos, se nesta execução
#   os passos de flush são os lentos e como a decodificação de cada backend se compara à do DynamicCache; onde o
#   veredito do fp8 diz nenhuma diferença e os passos de flush aparecem mais lentos, o custo está no empacotamento, não
#   na quantidade de números desquantizados.
# - A qualidade acompanha a largura em bits: com 256 tokens empacotados, os caches fp8, de 8 e de 4 bits escolhem o
#   próximo token do DynamicCache em 22 a 24 das 24 posições (o único erro do hqq de 8 bits cai num quase empate de
#   0,0111 nats); os de 2 bits, em 8 (hqq) e 10 (quanto).
# - Modelos com janela deslizante são recusados: o `QuantizedCache` só tem camadas completas. A máscara deslizante vem
#   de `config.sliding_window`, então um cache sem camadas que descartam tokens não leria as posições erradas; ele
#   guardaria todo token em toda camada, a memória que uma camada deslizante existe para economizar.
#
# **A seguir:** [05 · Caches de encoder-decoder e específicos de modelo](05_encoder_decoder_and_model_specific.ipynb).
